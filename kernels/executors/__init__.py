"""Executors: run a tile plan (dispatch, reference oracle, XLA block-sparse, Pallas TPU and GPU
visit lists), and the dense controls (splash, cuDNN, the per-platform rule, their memory model).

The Pallas kernels themselves (``kernels.executors.pallas_tpu``, ``kernels.executors.pallas_gpu``)
are not imported here: the dispatch loads one only when ``backend="pallas_tpu"`` or
``backend="pallas_gpu"`` is asked for, and says clearly when it is unavailable.
Splash attention is likewise imported on first use. The platform rule ``dense_controls`` is
exported by ``kernels.policy`` (here the name stays the submodule ``kernels.executors.dense_controls``).
"""

from kernels.executors.dense_controls import (
    check_cudnn_inputs,
    check_dense_pair,
    cudnn_attention,
    splash_attention,
)
from kernels.executors.dense_memory import dense_executor_temp_bytes, grows_quadratically
from kernels.executors.dispatch import (
    ALL_VARIANTS,
    BACKENDS,
    DEFAULT_KERNEL_OPTIONS,
    DENSE_PEERS,
    SUPPORTED_DTYPES,
    Kernel,
    KernelOptions,
    attention,
    make_attention,
)
from kernels.executors.pallas_tpu_visits import PARTIAL_PREDICATE, VisitSlots, build_visit_slots
from kernels.executors.reference import reference_attention
from kernels.executors.splash_tiles import (
    SPLASH_BLOCK_KV_COMPUTE,
    SPLASH_PREFERENCE,
    SplashTiles,
    splash_tiles,
    splash_vmem_bytes,
)
from kernels.executors.xla_blocksparse import (
    VisitGroup,
    VisitGroups,
    blocksparse_attention,
    visit_groups,
)

__all__ = [
    "ALL_VARIANTS",
    "BACKENDS",
    "DEFAULT_KERNEL_OPTIONS",
    "DENSE_PEERS",
    "PARTIAL_PREDICATE",
    "SPLASH_BLOCK_KV_COMPUTE",
    "SPLASH_PREFERENCE",
    "SUPPORTED_DTYPES",
    "Kernel",
    "KernelOptions",
    "SplashTiles",
    "VisitGroup",
    "VisitGroups",
    "VisitSlots",
    "attention",
    "blocksparse_attention",
    "build_visit_slots",
    "check_cudnn_inputs",
    "check_dense_pair",
    "cudnn_attention",
    "dense_executor_temp_bytes",
    "grows_quadratically",
    "make_attention",
    "reference_attention",
    "splash_attention",
    "splash_tiles",
    "splash_vmem_bytes",
    "visit_groups",
]
