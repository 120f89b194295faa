"""XLA's GPU compiler on a machine without a GPU: compile for an H200 that is not attached.

With the CUDA plugin installed (the ``gpu-compile`` extra: ``jax-cuda12-plugin`` and
``jax-cuda12-pjrt``, no CUDA driver needed), ``jax.experimental.topologies.get_topology_desc``
builds a compile-only GPU topology from a shape (``"1x1x1"``: slices x hosts x devices) and an
``xla.GpuTargetConfigProto`` in text form (``gpu_specs/h200.txtpb``, with its sources); compiling
for its device runs XLA's GPU compiler and Triton (Pallas GPU) as ``tpu_compiler`` does for a TPU.
cuDNN's fused attention needs the cuDNN library at compile time (``nvidia-cudnn-cu12``).
:func:`gpu_topology_compiler` refuses unless ``JAX_PLATFORMS`` leaves ``cuda`` out.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from evalharness.estimates.tpu_compiler import TpuCompiler, TpuCompilerUnavailable, compiler_of
from models.accelerator_env import cuda_plugin_installed

# The target configs we state, by target topology name.
_SPECS = {"h200": Path(__file__).with_name("gpu_specs") / "h200.txtpb"}
_DISTRIBUTION = "jax-cuda12-plugin"


def gpu_topology_compiler(topology: str) -> TpuCompiler:
    """A compile-only GPU topology (``h200``), described once.

    Raises:
        TpuCompilerUnavailable: the plugin is not installed, the topology has no stated target
            config, or ``JAX_PLATFORMS`` would let JAX initialise a GPU.
    """
    if not cuda_plugin_installed():
        raise TpuCompilerUnavailable(
            "the CUDA plugin is not installed: pip install -e '.[gpu-compile]' brings XLA's GPU "
            "compiler"
        )
    if topology not in _SPECS:
        raise TpuCompilerUnavailable(
            f"no GPU target config for {topology!r}; stated ones: {', '.join(_SPECS)}"
        )
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if not platforms or "cuda" in platforms.split(","):
        raise TpuCompilerUnavailable(
            f"JAX_PLATFORMS={platforms!r} lets JAX initialise a GPU backend; set "
            "JAX_PLATFORMS=cpu before JAX loads to compile for a GPU that is not attached"
        )
    return _describe(topology)


@functools.lru_cache(maxsize=4)
def _describe(topology: str) -> TpuCompiler:
    from jax.experimental import topologies

    spec = _SPECS[topology].read_text()
    desc = topologies.get_topology_desc(
        platform="cuda", topology_name=topology, topology="1x1x1", target_config=spec
    )
    return compiler_of(f"{topology}:1x1", desc.devices, _DISTRIBUTION)
