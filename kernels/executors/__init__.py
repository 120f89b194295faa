"""Executors: run a tile plan (dispatch, reference oracle, XLA block-sparse, Pallas TPU visits).

The Pallas TPU kernel itself (``kernels.executors.pallas_tpu``) is not imported here: the dispatch
loads it only when ``backend="pallas_tpu"`` is asked for, and says clearly when it is unavailable.
"""

from kernels.executors.dispatch import ALL_VARIANTS, BACKENDS, SUPPORTED_DTYPES, attention
from kernels.executors.pallas_tpu_visits import PARTIAL_PREDICATE, VisitSlots, build_visit_slots
from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import (
    VisitGroup,
    VisitGroups,
    blocksparse_attention,
    visit_groups,
)

__all__ = [
    "ALL_VARIANTS",
    "BACKENDS",
    "PARTIAL_PREDICATE",
    "SUPPORTED_DTYPES",
    "VisitGroup",
    "VisitGroups",
    "VisitSlots",
    "attention",
    "blocksparse_attention",
    "build_visit_slots",
    "reference_attention",
    "visit_groups",
]
