"""Policy: the sparsity schedule, head routing and its statistics, the ``attend`` policy and its
negative controls (deliberately broken sparse arms).

Also exports the dense-control rule (``dense_controls``, ``check_dense_pair``) that turns
``DENSE_EXECUTORS``' "auto" into concrete executors per platform.
"""

from kernels.executors.dense_controls import check_dense_pair, dense_controls
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.dense_attend import make_dense_attend
from kernels.policy.negative_controls import NEGATIVE_CONTROLS, QUALITY_CONTROLS, SPEED_CONTROLS
from kernels.policy.routing import (
    ROUTING_MODES,
    Routing,
    route_heads,
    route_rows,
    routing_flops,
    routing_flops_fraction,
    routing_key,
    sample_rows,
    sparse_attention_flops,
)
from kernels.policy.routing_stats import DENSE_FLAG, RoutingRecorder, RoutingStats
from kernels.policy.schedule import SPARSE_VARIANTS, SparseVariant, SparsitySchedule
from kernels.registry import DENSE_EXECUTORS, POLICY_BACKENDS

__all__ = [
    "DENSE_EXECUTORS",
    "DENSE_FLAG",
    "NEGATIVE_CONTROLS",
    "POLICY_BACKENDS",
    "QUALITY_CONTROLS",
    "ROUTING_MODES",
    "SPARSE_VARIANTS",
    "SPEED_CONTROLS",
    "AttentionPolicy",
    "Routing",
    "RoutingRecorder",
    "RoutingStats",
    "SparseVariant",
    "SparsitySchedule",
    "check_dense_pair",
    "dense_controls",
    "make_dense_attend",
    "route_heads",
    "route_rows",
    "routing_flops",
    "routing_flops_fraction",
    "routing_key",
    "sample_rows",
    "sparse_attention_flops",
]
