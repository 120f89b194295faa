"""Host-side visit lists of the Pallas GPU block-sparse kernel: mask-free visits, then masked ones.

The GPU kernel (``kernels.executors.pallas_gpu``) runs one program per (query tile, batch, head).
Each program walks two loops over key tiles: first those it computes without a mask, then those
that need the in-kernel predicate. Splitting the visits this way, once on the host, keeps the
masked/unmasked decision out of the inner loop (no branch, no predicate on full tiles).

Which visits are masked is decided exactly as for the TPU kernel
(``kernels.executors.pallas_tpu_visits.build_visit_slots``: every visit for b1, the plan's partial
tiles for b2, and any tile reaching past ``tokens`` whatever the plan calls it). Each list is then
stored as a ``kernels.executors.xla_visit_code.VisitCode``: a run-length code (a band row is one
or two runs of consecutive tiles) that the kernel decodes per step with a few scalar operations,
or a plain table when rows break into too many runs. The codes are constants of the lowered
module, so keeping them small matters when a model calls attention in every layer.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.executors.pallas_tpu_visits import VisitSlots, plan_visit_slots
from kernels.executors.xla_visit_code import RUNS, TABLE, VisitCode, encode_visits, narrowest_int
from kernels.masks.protocols import TilePlanLike

# Run breaks per row the kernel decodes (unrolled scalar code per step) before a table is cheaper.
MAX_RUN_BREAKS = 8


@dataclasses.dataclass(frozen=True, eq=False)
class GpuVisits:
    """A plan's visits as the GPU kernel walks them.

    Attributes:
        full: mask-free visit list [num_q_tiles, L_full] coded, or None when no row has one.
        masked: masked visit list [num_q_tiles, L_masked] coded, or None when no row has one.
        num_q_tiles: query tiles.
        num_kv_tiles: key tiles the padded key sequence must hold.
        visited: total tile visits.
        masked_visits: visits on the masked path.
    """

    full: VisitCode | None
    masked: VisitCode | None
    num_q_tiles: int
    num_kv_tiles: int
    visited: int
    masked_visits: int


def split_visit_slots(
    slots: VisitSlots,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per query tile, the mask-free visits and the masked ones, each in key-tile order.

    Args:
        slots: merged visit slots (``build_visit_slots``).

    Returns:
        (full_kv int32 [num_q_tiles, max(1, max_full)], full_count int32 [num_q_tiles],
        masked_kv int32 [num_q_tiles, max(1, max_masked)], masked_count int32 [num_q_tiles]);
        entries past a row's count repeat its last valid entry (0 for an empty row).
    """
    shape = (slots.num_q_tiles, slots.slots)
    kv = slots.kv_index.reshape(shape).astype(np.int64)
    masked = slots.masked.reshape(shape).astype(bool)
    valid = np.arange(slots.slots)[None, :] < slots.count[:, None]
    lists = []
    for keep in (valid & ~masked, valid & masked):
        count = keep.sum(axis=1)
        # Stable: kept entries first, in their (key-tile) order.
        order = np.argsort(~keep, axis=1, kind="stable")
        rows = np.take_along_axis(kv, order, axis=1)
        width = max(1, int(count.max(initial=0)))
        rows = rows[:, :width]
        last = np.take_along_axis(rows, np.maximum(count - 1, 0)[:, None], axis=1)
        filled = np.arange(width)[None, :] < count[:, None]
        rows = np.where(filled, rows, np.where(count[:, None] > 0, last, 0))
        lists += [rows.astype(np.int32), count.astype(np.int32)]
    return tuple(lists)


def encode_for_kernel(
    kv: np.ndarray, count: np.ndarray, max_breaks: int = MAX_RUN_BREAKS
) -> VisitCode | None:
    """A visit list coded for in-kernel decoding, or None when every row is empty.

    Args:
        kv: int [g, L] visit list (L >= 1).
        count: int [g] valid entries per row.
        max_breaks: most run breaks per row decoded as runs; more gives a table.

    Returns:
        The VisitCode (``RUNS`` with at most ``max_breaks`` breaks, else ``TABLE``), or None.
    """
    count = np.asarray(count, np.int64)
    if not count.any():
        return None
    code = encode_visits(kv, count)
    if code.kind == RUNS and code.breaks > max_breaks:
        table = np.concatenate([count[:, None], np.asarray(kv, np.int64)], axis=1)
        code = VisitCode(TABLE, narrowest_int(table), code.steps, code.padded)
    return code


def plan_gpu_visits(
    plan: TilePlanLike, variant: str, max_breaks: int = MAX_RUN_BREAKS
) -> GpuVisits:
    """The GPU kernel's visit lists for a tile plan.

    The kernel builds them once per plan and input signature (its program cache), so this is
    not cached itself.

    Args:
        plan: a tile plan (``kernels.plans.tiles.TilePlan`` or a look-alike).
        variant: "b0", "b1", "b2" or "b3".
        max_breaks: run breaks per row decoded as runs (``encode_for_kernel``).

    Returns:
        The plan's ``GpuVisits``.

    Raises:
        ValueError: on an inconsistent plan (see ``build_visit_slots``).
    """
    slots = plan_visit_slots(plan, variant)
    full_kv, full_count, masked_kv, masked_count = split_visit_slots(slots)
    return GpuVisits(
        full=encode_for_kernel(full_kv, full_count, max_breaks),
        masked=encode_for_kernel(masked_kv, masked_count, max_breaks),
        num_q_tiles=slots.num_q_tiles,
        num_kv_tiles=slots.num_kv_tiles,
        visited=slots.visited,
        masked_visits=slots.masked_visits,
    )
