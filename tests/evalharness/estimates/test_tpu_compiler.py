"""The compile-only TPU compiler's guards and its refusals in one line (no libtpu needed)."""

import pytest

from evalharness.estimates import tpu_compiler
from evalharness.estimates.tpu_compiler import (
    TpuCompilerUnavailable,
    compiler_reason,
    topology_compiler,
)

# The shape of Mosaic's scoped-VMEM refusal (XLA error E1001), as libtpu 0.0.42.1 words it.
E1001 = (
    "RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\n"
    "Ran out of memory in memory space vmem while allocating on stack for %blocksparse_attention"
    "_b3.1 = bf16[10,76544,128] custom-call(...). Scoped allocation with size 21.79M and limit "
    "16.00M exceeded scoped vmem limit by 5.79M. It should not be possible to run out of scoped "
    "vmem -\nSee https://openxla.org/xla/errors/error_1001 for more details."
)


def test_a_scoped_vmem_refusal_is_condensed_to_its_figures():
    reason = compiler_reason(RuntimeError(E1001))
    assert reason == (
        "Mosaic ran out of scoped VMEM: it needs more than 21.79MB at a limit of 16.00MB "
        "(XLA error E1001)"
    )


def test_any_other_refusal_is_its_first_line():
    error = ValueError("\n  Mosaic failed to compile TPU kernel: Bad lhs type\nmore detail\n")
    assert compiler_reason(error) == "ValueError: Mosaic failed to compile TPU kernel: Bad lhs type"
    assert len(compiler_reason(ValueError("x" * 1000))) == len("ValueError: ") + 300


def test_without_libtpu_the_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setattr(tpu_compiler, "libtpu_installed", lambda: False)
    with pytest.raises(TpuCompilerUnavailable, match=r"pip install -e '\.\[tpu\]'"):
        topology_compiler("v6e:2x4")


@pytest.mark.parametrize(
    "platforms, skip, named",
    [("", "1", "JAX_PLATFORMS"), ("tpu,cpu", "1", "JAX_PLATFORMS"), ("cpu", "0", "TPU_SKIP")],
)
def test_libtpu_is_never_loaded_in_an_unsafe_environment(monkeypatch, platforms, skip, named):
    # The check runs before libtpu could load: pretend it is installed, make the environment
    # unsafe, and the compiler must refuse (naming the variable) without touching libtpu.
    monkeypatch.setattr(tpu_compiler, "libtpu_installed", lambda: True)
    monkeypatch.setattr(tpu_compiler, "_describe", _must_not_load)
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", skip)
    with pytest.raises(TpuCompilerUnavailable, match=named):
        topology_compiler("v6e:2x4")


def _must_not_load(topology):
    raise AssertionError(f"libtpu would have loaded for {topology}")
