"""Policy: the sparsity schedule, head routing and its statistics, and the ``attend`` policy."""

from kernels.policy.attention_policy import (
    DENSE_EXECUTORS,
    POLICY_BACKENDS,
    AttentionPolicy,
    make_dense_attend,
)
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

__all__ = [
    "DENSE_EXECUTORS",
    "DENSE_FLAG",
    "POLICY_BACKENDS",
    "ROUTING_MODES",
    "SPARSE_VARIANTS",
    "AttentionPolicy",
    "Routing",
    "RoutingRecorder",
    "RoutingStats",
    "SparseVariant",
    "SparsitySchedule",
    "make_dense_attend",
    "route_heads",
    "route_rows",
    "routing_flops",
    "routing_flops_fraction",
    "routing_key",
    "sample_rows",
    "sparse_attention_flops",
]
