"""Parallel: the device mesh, the all-to-all exchange, sharded routing, sequence-parallel attend."""

from kernels.parallel.attend import PLACEMENTS, SequenceParallelAttend, parallelize
from kernels.parallel.exchange import (
    exchange_bytes,
    heads_to_sequence,
    local_head_flags,
    padded_heads,
    permute_sharded,
    sequence_to_heads,
)
from kernels.parallel.mesh import (
    SEQ_AXIS,
    check_same_config,
    config_digest,
    describe_mesh,
    initialize_distributed,
    make_mesh,
)
from kernels.parallel.routing import gather_rows, route_rows_sharded

__all__ = [
    "PLACEMENTS",
    "SEQ_AXIS",
    "SequenceParallelAttend",
    "check_same_config",
    "config_digest",
    "describe_mesh",
    "exchange_bytes",
    "gather_rows",
    "heads_to_sequence",
    "initialize_distributed",
    "local_head_flags",
    "make_mesh",
    "padded_heads",
    "parallelize",
    "permute_sharded",
    "route_rows_sharded",
    "sequence_to_heads",
]
