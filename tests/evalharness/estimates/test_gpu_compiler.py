"""XLA's GPU compiler for an H200 that is not attached (the ``gpu-compile`` extra).

The compile tests run where the CUDA plugin is installed (they are skipped elsewhere, CI's steps
included, which do not install the 2 GB extra); the refusals without it run everywhere.
"""

import jax
import jax.numpy as jnp
import pytest

from evalharness.estimates import TpuCompilerUnavailable, compile_for, gpu_topology_compiler
from models.accelerator_env import cuda_plugin_installed

needs_plugin = pytest.mark.skipif(
    not cuda_plugin_installed(), reason="needs the CUDA plugin: pip install -e '.[gpu-compile]'"
)


def test_without_the_plugin_the_refusal_names_the_extra(monkeypatch):
    monkeypatch.setattr("evalharness.estimates.gpu_compiler.cuda_plugin_installed", lambda: False)
    with pytest.raises(TpuCompilerUnavailable, match=r"pip install -e '\.\[gpu-compile\]'"):
        gpu_topology_compiler("h200")


def test_an_unknown_gpu_and_an_unsafe_environment_are_refused(monkeypatch):
    monkeypatch.setattr("evalharness.estimates.gpu_compiler.cuda_plugin_installed", lambda: True)
    with pytest.raises(TpuCompilerUnavailable, match="no GPU target config for 'a100'"):
        gpu_topology_compiler("a100")
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    with pytest.raises(TpuCompilerUnavailable, match="JAX_PLATFORMS='cuda,cpu'"):
        gpu_topology_compiler("h200")


@needs_plugin
def test_a_pallas_gpu_kernel_and_cudnn_compile_for_the_h200():
    from kernels.executors.pallas_gpu import pallas_gpu_blocksparse_attention
    from kernels.masks.band import BandMask
    from kernels.plans.block_sizes import BlockSizes
    from kernels.plans.tiles import build_plan

    compiler = gpu_topology_compiler("h200")
    assert compiler.describe().startswith("NVIDIA H200 1x1 by jax-cuda12-plugin ")
    plan = build_plan(BandMask(8192, 2000, 512), BlockSizes(128, 64), "b3", rounding_tolerance=None)
    qkv = jax.ShapeDtypeStruct((1, 8192, 2, 128), jnp.bfloat16)

    def sparse(q, k, v):
        return pallas_gpu_blocksparse_attention(q, k, v, plan, variant="b3")

    def dense(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, implementation="cudnn")

    for fn in (sparse, dense):
        program = compile_for(compiler.device, fn, qkv, qkv, qkv)
        assert program.argument_bytes == 3 * 8192 * 2 * 128 * 2


@needs_plugin
def test_a_dry_run_for_the_h200_compiles_each_arms_loop(tmp_path):
    from evalharness.admission import dry_run
    from tests.helpers.harness_config import small_config

    cfg = small_config(
        tmp_path, "dry_run=true", "target=h200", "max_minutes=1e9", "kernel.block_q=64", small=False
    )
    code, report = dry_run(cfg)
    assert code == 0, report
    verdict = report[report.index("## Verdict") :].splitlines()[0]
    assert "compiled for NVIDIA H200 1x1 by jax-cuda12-plugin " in verdict
    assert "planned by XLA's GPU compiler, Triton (Pallas GPU) and cuDNN" in report
    assert "| denoising step (compiled) | denoise |" in report
