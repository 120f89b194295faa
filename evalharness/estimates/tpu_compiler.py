"""The real TPU compiler on a machine without a TPU: compile for a topology that is not attached.

With libtpu installed (the ``tpu`` extra), ``jax.experimental.topologies.get_topology_desc``
describes a TPU slice (``v6e:2x4``: 8 chips of kind "TPU v6 lite") that JAX can compile for but
not run on; ``jax.jit(f).lower(<ShapeDtypeStructs placed on one of its chips>).compile()`` runs
XLA's TPU compiler and Mosaic (Pallas kernels' SMEM and VMEM are allocated here), and
``memory_analysis()`` gives the program's sizes: the ahead-of-time route of MaxText's
``train_compile.py`` and axlearn's ``run_aot_compilation.py``.

libtpu must not initialise a TPU or query a cloud metadata server here: :func:`topology_compiler`
refuses unless ``JAX_PLATFORMS`` leaves the TPU out and ``TPU_SKIP_MDS_QUERY=1`` is set
(``models.accelerator_env`` sets both when the harness is imported first).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from models.accelerator_env import libtpu_installed
from models.interruption import stop_if_signalled  # the estimates sit below exit_codes


@dataclass(frozen=True)
class TpuCompiler:
    """A compile-only TPU topology.

    Attributes:
        topology: the topology name (``v6e:2x4``).
        device_kind: what JAX calls its chips ("TPU v6 lite").
        chips: chips in the topology.
        libtpu_version: the installed version of the distribution that compiles.
        device: the chip a per-chip program is compiled for.
        devices: every chip of the topology (a mesh over them compiles the collectives).
        toolchain: what compiles: ``libtpu`` (XLA's TPU compiler and Mosaic), or
            ``jax-cuda12-plugin`` (XLA's GPU compiler and Triton, ``gpu_compiler``).
    """

    topology: str
    device_kind: str
    chips: int
    libtpu_version: str
    device: Any
    devices: tuple[Any, ...] = ()
    toolchain: str = "libtpu"

    def describe(self) -> str:
        """E.g. ``TPU v6 lite 2x4 by libtpu 0.0.42.1``."""
        shape = self.topology.partition(":")[2]
        return f"{self.device_kind} {shape} by {self.toolchain} {self.libtpu_version}"


@dataclass(frozen=True)
class CompiledProgram:
    """The TPU compiler's figures for one program (per chip).

    Attributes:
        argument_bytes: its inputs.
        output_bytes: its outputs.
        temp_bytes: temporaries (its working set beyond inputs and outputs, buffers reused).
        code_bytes: generated code.
        compile_s: seconds the lowering and compile took on this machine.
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    code_bytes: int
    compile_s: float

    @property
    def peak_bytes(self) -> int:
        """Everything the program holds at once: arguments, outputs, temporaries and code."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes + self.code_bytes


class TpuCompilerUnavailable(RuntimeError):
    """No TPU compiler can be used here; the message says why and what to install or set."""


def unsafe_environment() -> str | None:
    """Why libtpu may not be loaded in this process, or None when it may."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if not platforms or "tpu" in platforms.split(","):
        return (
            f"JAX_PLATFORMS={platforms!r} lets JAX initialise a TPU backend; set "
            "JAX_PLATFORMS=cpu (and TPU_SKIP_MDS_QUERY=1) before JAX loads, or import evalharness "
            "first, which does so on a machine without TPU chips"
        )
    if os.environ.get("TPU_SKIP_MDS_QUERY") != "1":
        return (
            "TPU_SKIP_MDS_QUERY is not 1, so libtpu may query a cloud metadata server; set "
            "TPU_SKIP_MDS_QUERY=1 before JAX loads"
        )
    return None


def topology_compiler(topology: str) -> TpuCompiler:
    """The compile-only TPU topology ``topology`` (described once, checked at every call).

    Args:
        topology: ``v6e:2x4``, ``v6e:1x1``, ...

    Raises:
        TpuCompilerUnavailable: libtpu is not installed, or the environment would let it reach
            for a TPU or a metadata server.
    """
    if not libtpu_installed():
        raise TpuCompilerUnavailable(
            "libtpu is not installed: pip install -e '.[tpu]' brings the TPU compiler"
        )
    unsafe = unsafe_environment()
    if unsafe is not None:
        raise TpuCompilerUnavailable(unsafe)
    return _describe(topology)


@functools.lru_cache(maxsize=8)
def _describe(topology: str) -> TpuCompiler:
    from jax.experimental import topologies

    extra = {}
    if topology.partition(":")[2] == "1x1":  # one chip: no host bounds to infer
        extra = dict(chips_per_host_bounds=(1, 1, 1), num_slices=1)
    desc = topologies.get_topology_desc(platform="tpu", topology_name=topology, **extra)
    return compiler_of(topology, desc.devices, "libtpu")


def compiler_of(topology: str, devices: Any, distribution: str) -> TpuCompiler:
    """The ``TpuCompiler`` of a compile-only topology's ``devices``, compiled by ``distribution``."""
    devices = tuple(devices)
    return TpuCompiler(
        topology=topology,
        device_kind=devices[0].device_kind,
        chips=len(devices),
        libtpu_version=importlib.metadata.version(distribution),
        device=devices[0],
        devices=devices,
        toolchain=distribution,
    )


def on_device(tree: Any, device: Any) -> Any:
    """``tree``'s abstract arrays (``ShapeDtypeStruct`` or arrays) placed on ``device``."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def compile_program(
    compile_: Callable[[], jax.stages.Compiled],
) -> tuple[jax.stages.Compiled, CompiledProgram]:
    """Runs ``compile_`` (a lowering and its compile, or a compile alone), timed.

    Returns:
        The compiled program, and its ``memory_analysis()`` and seconds as ``CompiledProgram``.
    """
    # Safe points for Ctrl-C and SIGTERM: a plan of many compiles (a dry run, the preflight)
    # ends at the first compile boundary after the signal, not after its last compile.
    stop_if_signalled()
    start = time.perf_counter()
    compiled = compile_()
    seconds = time.perf_counter() - start
    stop_if_signalled()
    analysis = compiled.memory_analysis()
    return compiled, CompiledProgram(
        argument_bytes=int(analysis.argument_size_in_bytes),
        output_bytes=int(analysis.output_size_in_bytes),
        temp_bytes=int(analysis.temp_size_in_bytes),
        code_bytes=int(analysis.generated_code_size_in_bytes),
        compile_s=seconds,
    )


def compile_for(device: Any, fn: Callable[..., Any], *args: Any) -> CompiledProgram:
    """Compiles ``jax.jit(fn)`` for ``device`` at the abstract ``args`` (nothing runs).

    Args:
        device: a compile-only TPU device (``TpuCompiler.device``) or any JAX device; None:
            this host's default device, the arguments as given.
        fn: the function.
        *args: its abstract arguments (pytrees of ``ShapeDtypeStruct``).
    """
    placed = args if device is None else on_device(args, device)
    return compile_program(lambda: jax.jit(fn).lower(*placed).compile())[1]


# Mosaic's scoped-VMEM refusal (XLA error E1001) names the allocation and the limit it exceeded.
_SCOPED_VMEM = re.compile(r"Scoped allocation with size (\S+) and limit (\S+) exceeded")


def scoped_vmem_shortfall(error: BaseException) -> tuple[str, str] | None:
    """(needed, limit) as Mosaic printed them ("16.16M", "16.00M") when ``error`` is its
    scoped-VMEM refusal, else None."""
    found = _SCOPED_VMEM.search(str(error))
    return (found.group(1), found.group(2)) if found else None


def compiler_reason(error: Exception) -> str:
    """A compiler's refusal in one line: Mosaic's scoped VMEM figures when it ran out of VMEM,
    else the message's first line (300 characters at most)."""
    text = str(error)
    found = _SCOPED_VMEM.search(text)
    if found:
        return (
            f"Mosaic ran out of scoped VMEM: it needs more than {found.group(1)}B at a limit of "
            f"{found.group(2)}B (XLA error E1001)"
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first[:300]}"
