"""Visit lists as small integer codes that the XLA executor decodes in-graph, step by step.

Anything the jitted executor closes over as a NumPy array becomes a constant of the lowered module,
once per call site. Rectangular visit tables ([query tiles, steps] int32, validity masks, per-row
token indices) cost megabytes per call at 1440p, and a model calls attention in every layer (and in
both branches of a ``lax.cond``). A visit list is instead stored as a run-length code: the visited
tiles of a row are a few runs of consecutive tile indices (a band is one run, plus the sink's run),
so each row keeps its first index, where the runs break and by how much the index jumps there:

    index(i, j) = first[i] + j' + sum_r [j' >= break_pos[i, r]] * jump[i, r],
    j' = min(j, max(count[i] - 1, 0)).

Clamping the step to the row's last valid entry repeats that entry over the row's padding, which is
how ``kernels.plans.tiles`` pads its lists, so the decoded list equals the table exactly. Steps at or
beyond ``count[i]`` are padding (``j < count[i]`` is the validity mask, no table of it is stored).
Lists whose rows break often (where the code would not be smaller) are kept as a plain table. Either
form is stored in the narrowest signed integer dtype that holds its values.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

RUNS, TABLE = "runs", "table"


def narrowest_int(values: np.ndarray) -> np.ndarray:
    """``values`` in the narrowest of int8 / int16 / int32 that holds them all.

    Args:
        values: integer array of any shape.

    Returns:
        The same values and shape, int8, int16 or int32.
    """
    values = np.asarray(values)
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype)
    raise ValueError(f"visit values span [{low}, {high}], beyond int32")


@dataclasses.dataclass(frozen=True, eq=False)
class VisitCode:
    """One rectangular visit list [g, L], coded for in-graph decoding.

    Attributes:
        kind: ``RUNS`` or ``TABLE``.
        code: int8/int16/int32 [g, C]. Column 0 is the valid count per row. For ``RUNS``,
            column 1 is the row's first index, then R break positions, then R jumps (C = 2 + 2R;
            unused breaks sit at position L, never reached). For ``TABLE``, the L indices
            (C = 1 + L).
        steps: L, the scan length.
        padded: whether some row has fewer than L valid entries (the scan then masks those steps).
    """

    kind: str
    code: np.ndarray
    steps: int
    padded: bool

    @property
    def breaks(self) -> int:
        """R: run breaks per row (0 for ``TABLE``)."""
        return (self.code.shape[1] - 2) // 2 if self.kind == RUNS else 0


def _breaks(kv: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each row's valid entries stop running consecutively, and the jump there.

    Args:
        kv: int [g, L] visit list.
        count: int [g] valid entries per row.

    Returns:
        (position int64 [g, R], jump int64 [g, R]), R the most breaks of any row; unused slots hold
        position L and jump 0.
    """
    g, steps = kv.shape
    kv = kv.astype(np.int64)
    step = np.arange(1, steps)[None, :]
    cut = (step < count[:, None]) & (kv[:, 1:] != kv[:, :-1] + 1)  # [g, L - 1]
    per_row = cut.sum(axis=1)
    width = int(per_row.max(initial=0))
    rows, cols = np.nonzero(cut)  # row-major: each row's breaks in step order
    first = np.concatenate([[0], np.cumsum(per_row)])
    rank = np.arange(rows.size) - first[rows]
    position = np.full((g, width), steps, np.int64)
    jump = np.zeros((g, width), np.int64)
    position[rows, rank] = cols + 1
    jump[rows, rank] = kv[rows, cols + 1] - kv[rows, cols] - 1
    return position, jump


def encode_visits(kv: np.ndarray, count: np.ndarray) -> VisitCode:
    """Codes a visit list, as runs unless a plain table is smaller.

    Args:
        kv: int [g, L] visit list, L >= 1 (entries at or beyond a row's count are padding).
        count: int [g] valid entries per row (<= L).

    Returns:
        The VisitCode.
    """
    kv, count = np.asarray(kv), np.asarray(count, np.int64)
    steps = kv.shape[1]
    padded = bool((count < steps).any())
    position, jump = _breaks(kv, count)
    if 2 + 2 * position.shape[1] <= 1 + steps:
        code = np.concatenate([count[:, None], kv[:, :1], position, jump], axis=1)
        return VisitCode(RUNS, narrowest_int(code), steps, padded)
    code = np.concatenate([count[:, None], kv], axis=1)
    return VisitCode(TABLE, narrowest_int(code), steps, padded)


def decoder(visits: VisitCode, code: jax.Array | None = None):
    """In-graph decoder of a VisitCode; call inside the traced function.

    Args:
        visits: the code (embedded as one narrow constant of shape [g, C]).
        code: int32 [r, C], some rows of ``visits.code`` already in the graph (e.g. a
            dynamic slice of it: one chunk of query tiles); None decodes all of ``visits.code``.

    Returns:
        ``decode(step) -> (index int32 [g], valid bool [g] or None)`` for a traced int32 scalar
        step in [0, L) (g = r when ``code`` is given); valid is None when the list has no padding.
    """
    code = jnp.asarray(visits.code if code is None else code).astype(jnp.int32)
    count = code[:, 0]
    last = jnp.maximum(count - 1, 0)
    r = visits.breaks

    def decode(step: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        valid = step < count if visits.padded else None
        if visits.kind == TABLE:
            return jax.lax.dynamic_index_in_dim(code, step + 1, axis=1, keepdims=False), valid
        at = jnp.minimum(step, last)
        index = code[:, 1] + at
        if r:
            position, jump = code[:, 2 : 2 + r], code[:, 2 + r :]
            index = index + jnp.sum(jnp.where(at[:, None] >= position, jump, 0), axis=1)
        return index, valid

    return decode


def decode_numpy(visits: VisitCode) -> np.ndarray:
    """Host-side decoding (the same formula, for tests).

    Args:
        visits: the code.

    Returns:
        int32 [g, L]: the list, each row's padding repeating its last valid entry.
    """
    code = visits.code.astype(np.int64)
    if visits.kind == TABLE:
        return code[:, 1:].astype(np.int32)
    r = visits.breaks
    at = np.minimum(np.arange(visits.steps)[None, :], np.maximum(code[:, :1] - 1, 0))
    index = code[:, 1:2] + at
    for b in range(r):
        index += np.where(at >= code[:, 2 + b : 3 + b], code[:, 2 + r + b : 3 + r + b], 0)
    return index.astype(np.int32)
