"""Block-sparse attention in pure JAX/XLA (runs on CPU, GPU and TPU): variants B0-B3.

Query tiles advance together through an online-softmax ``lax.scan``; at step j every query tile
gathers one K/V tile, the j-th entry of its static visit list. Gathering a single tile per step
keeps memory at O(N * tile) and lets XLA fuse the gather into the matmul; gathering every listed tile
at once was measured to be much slower. A step's float32 scores are held near 8 MiB
(``FLASH_SCORE_ELEMENTS``, as the CPU's dense control ``kernels.executors.xla_flash`` holds them):
a group whose query tiles would exceed that is scanned a chunk of tiles at a time (a ``lax.map``;
768 x 768 tiles with 2 heads: one tile per step), small tiles all together as before.

Query tiles visit different numbers of tiles, and a scan runs as long as its longest list. Padded
steps cost a full tile product, so query tiles are grouped by visit count (a small dynamic
programme over the sorted counts, ``visit_groups``) and each group runs its own scans. Within a group
the full tiles run first in a mask-free scan, then the partial tiles in a masked scan that continues
from the same running max / sum / accumulator, which is exactly how their softmax statistics combine.

A step may run several consecutive entries of every list as one matmul over their keys (a wide
step, ``wide_step_tiles``: two 768-key tiles per step on a CPU), with the list's remainder in
single steps after it, so no tile is computed twice.

The visit lists reach the compiled module as constants at every call site, so they are embedded as
small run-length codes decoded one step at a time (``kernels.executors.xla_visit_code``): a band's
lists cost O(query tiles) narrow integers instead of [query tiles, steps] int32 tables, validity
masks and per-row token indices (the latter are rebuilt in-graph from iota).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.executors.xla_flash import FLASH_SCORE_ELEMENTS
from kernels.executors.xla_scan_steps import (
    query_tiles_per_step,
    scan_tiles,
    take_tiles,
    wide_step_tiles,
)
from kernels.executors.xla_visit_code import VisitCode, encode_visits, narrowest_int
from kernels.plans.tiles import TilePlan


@dataclasses.dataclass(frozen=True, eq=False)
class VisitGroup:
    """Query tiles scanned together.

    The tables are the host-side view; the executor embeds only ``q_tiles`` and the two codes.

    Attributes:
        q_tiles: int32 [g], query tile indices.
        full_kv: int32 [g, Lf]; full tiles per step (Lf may be 0).
        full_valid: bool [g, Lf], or None when no entry is padding.
        partial_kv: int32 [g, Lp].
        partial_valid: bool [g, Lp] or None.
        full_code: ``full_kv`` and its counts as the executor embeds them (None when Lf is 0).
        partial_code: ``partial_kv`` likewise (None when Lp is 0).
    """

    q_tiles: np.ndarray
    full_kv: np.ndarray
    full_valid: np.ndarray | None
    partial_kv: np.ndarray
    partial_valid: np.ndarray | None
    full_code: VisitCode | None
    partial_code: VisitCode | None


@dataclasses.dataclass(frozen=True, eq=False)
class VisitGroups:
    """The visit groups of one plan and what padding they cost.

    Attributes:
        groups: the visit groups.
        restore: int32 [nq]; position of each query tile in the concatenated group outputs.
        executed_visits: tile products the scans run (padding included).
        wasted_fraction: padded tile products / executed tile products.
    """

    groups: tuple[VisitGroup, ...]
    restore: np.ndarray
    executed_visits: int
    wasted_fraction: float


def _group_bounds(full: np.ndarray, partial: np.ndarray, max_groups: int) -> list[int]:
    """Splits rows (already sorted) into <= max_groups runs minimising padded tile products.

    Returns the run boundaries [0, ..., n]. Among groupings within 1% of the best cost the one with
    fewest groups wins (each group adds a scan). The dynamic programme is that of
    ``_reference_group_bounds`` (same costs, same first-minimum choices), evaluated a block of
    right ends at a time with NumPy: O(n) memory per block and no Python loop per pair of rows.
    """
    n = full.size
    full, partial = np.asarray(full, np.int64), np.asarray(partial, np.int64)
    best = np.full((max_groups + 1, n + 1), np.inf)
    back = np.zeros((max_groups + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    run_f = np.zeros(n + 1, np.int64)  # max(full[a:b0]) for a < b0, entering each block
    run_p = np.zeros(n + 1, np.int64)
    width = max(1, (1 << 22) // max(1, n))
    for b0 in range(1, n + 1, width):
        b1 = min(n + 1, b0 + width)
        ends = np.arange(b0, b1)  # right ends b of this block; the group's last row is b - 1
        starts = np.arange(b1 - 1)[:, None]  # left ends a (a < b)
        inside = starts < ends[None, :]
        max_f = np.maximum.accumulate(np.where(inside, full[ends - 1][None, :], 0), axis=1)
        max_p = np.maximum.accumulate(np.where(inside, partial[ends - 1][None, :], 0), axis=1)
        max_f = np.maximum(max_f, run_f[: b1 - 1, None])
        max_p = np.maximum(max_p, run_p[: b1 - 1, None])
        run_f[: b1 - 1], run_p[: b1 - 1] = max_f[:, -1], max_p[:, -1]
        cost = np.where(inside, (ends[None, :] - starts) * (max_f + max_p), np.inf)
        for g in range(1, max_groups + 1):
            totals = best[g - 1, : b1 - 1, None] + cost
            a = np.argmin(totals, axis=0)
            best[g, b0:b1], back[g, b0:b1] = totals[a, np.arange(ends.size)], a
    return _fewest_groups_near_best(best, back, n)


def _fewest_groups_near_best(best: np.ndarray, back: np.ndarray, n: int) -> list[int]:
    """Bounds of the fewest groups whose cost is within 1% of the best over any group count.

    Args:
        best: float [max_groups + 1, n + 1]; best[g, b] is the least cost of rows [0, b) in g groups.
        back: int [max_groups + 1, n + 1]; the start of the last group of that best split.
        n: rows.

    Returns:
        Group boundaries [0, ..., n].
    """
    floor = best[1:, n].min()
    groups = 1 + int(np.flatnonzero(best[1:, n] <= floor * 1.01 + 1e-9)[0])
    bounds = [n]
    for g in range(groups, 0, -1):
        bounds.append(int(back[g, bounds[-1]]))
    return bounds[::-1]


def _reference_group_bounds(full: np.ndarray, partial: np.ndarray, max_groups: int) -> list[int]:
    """Reference for ``_group_bounds`` (an O(n^2) Python loop for the costs); kept for tests."""
    n = full.size
    inf = float("inf")
    cost = np.full((n + 1, n + 1), inf)
    for a in range(n):
        mf = mp = 0
        for b in range(a + 1, n + 1):
            mf, mp = max(mf, full[b - 1]), max(mp, partial[b - 1])
            cost[a, b] = (b - a) * (mf + mp)
    best = np.full((max_groups + 1, n + 1), inf)
    back = np.zeros((max_groups + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for g in range(1, max_groups + 1):
        for b in range(1, n + 1):
            totals = best[g - 1, :b] + cost[:b, b]
            a = int(np.argmin(totals))
            best[g, b], back[g, b] = totals[a], a
    return _fewest_groups_near_best(best, back, n)


def _trim(kv: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    width = int(count.max(initial=0))
    kv = np.ascontiguousarray(kv[:, :width])
    valid = np.arange(width)[None, :] < count[:, None]
    return kv, (None if valid.all() else valid)


@functools.lru_cache(maxsize=128)
def visit_groups(plan: TilePlan, max_groups: int = 8) -> VisitGroups:
    """Groups the plan's query tiles so little scan work is padding.

    Args:
        plan: the tile plan.
        max_groups: upper bound on groups (scans per variant path).

    Returns:
        The VisitGroups (cached per plan).
    """
    fc, pc = plan.full_count.astype(np.int64), plan.partial_count.astype(np.int64)
    order = np.lexsort((pc, fc + pc))
    bounds = _group_bounds(fc[order], pc[order], max(1, max_groups))
    groups = []
    executed = 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[a:b].astype(np.int32)
        full_kv, full_valid = _trim(plan.full_kv[rows], plan.full_count[rows])
        partial_kv, partial_valid = _trim(plan.partial_kv[rows], plan.partial_count[rows])
        executed += rows.size * (full_kv.shape[1] + partial_kv.shape[1])
        codes = [
            encode_visits(kv, count[rows]) if kv.shape[1] else None
            for kv, count in ((full_kv, plan.full_count), (partial_kv, plan.partial_count))
        ]
        groups.append(VisitGroup(rows, full_kv, full_valid, partial_kv, partial_valid, *codes))
    restore = np.empty_like(order)
    restore[order] = np.arange(order.size)
    visits = int(fc.sum() + pc.sum())
    return VisitGroups(
        groups=tuple(groups),
        restore=restore.astype(np.int32),
        executed_visits=executed,
        wasted_fraction=(executed - visits) / max(1, executed),
    )


def _tile_constant(tiles: np.ndarray) -> jax.Array:
    """int32 tile indices, embedded in the module in the narrowest dtype that holds them."""
    return jnp.asarray(narrowest_int(tiles)).astype(jnp.int32)


def _initial_state(b: int, h: int, g: int, bq: int, d: int):
    return (
        jnp.full((b, h, g, bq), -jnp.inf, jnp.float32),
        jnp.zeros((b, h, g, bq), jnp.float32),
        jnp.zeros((b, h, g, bq, d), jnp.float32),
    )


def _run_group(
    qt, kt, vt, plan: TilePlan, q_tiles, group: VisitGroup, codes=(None, None), width: int = 1
):
    """Scans query tiles ``q_tiles`` (int32 [g]) over ``group``'s lists; [B,H,g,BQ,D] out.

    ``codes`` are the rows of the group's full and partial codes these tiles use (None: all).
    """
    b, h, _, bq, d = qt.shape
    q_group = take_tiles(qt, q_tiles, axis=2)
    state = _initial_state(b, h, q_tiles.shape[0], bq, d)
    if group.full_code is not None:
        state = scan_tiles(state, q_group, kt, vt, group.full_code, None, None, codes[0], width)
    if group.partial_code is not None:
        q_index = q_tiles[:, None] * bq + jax.lax.iota(jnp.int32, bq)[None, :]
        state = scan_tiles(
            state, q_group, kt, vt, group.partial_code, plan.mask, q_index, codes[1], width
        )
    _, total, acc = state
    return acc / jnp.where(total == 0, 1.0, total)[..., None]


def _group_out(qt, kt, vt, plan: TilePlan, q_tiles: np.ndarray, group: VisitGroup, width: int):
    """All of a group's query tiles in one scan per list: [B,H,g,BQ,D]."""
    return _run_group(qt, kt, vt, plan, _tile_constant(q_tiles), group, width=width)


def _chunked_group_out(qt, kt, vt, plan: TilePlan, group: VisitGroup, rows: int, width: int):
    """A group's query tiles ``rows`` at a time (a ``lax.map`` over chunks): [B,H,g,BQ,D].

    The group is padded to whole chunks by repeating its last query tile (and its code rows);
    the repeats' outputs are dropped.
    """
    g = group.q_tiles.size
    chunks = -(-g // rows)
    pad = chunks * rows - g

    def padded(rows_array: np.ndarray) -> np.ndarray:
        return np.concatenate([rows_array, np.repeat(rows_array[-1:], pad, axis=0)], axis=0)

    q_tiles = _tile_constant(padded(group.q_tiles))
    codes = [
        None if c is None else jnp.asarray(padded(c.code))
        for c in (group.full_code, group.partial_code)
    ]

    def chunk(i):
        start = i * rows
        cut = lambda x: jax.lax.dynamic_slice_in_dim(x, start, rows, axis=0)
        tiles = cut(q_tiles)
        chunk_codes = tuple(None if c is None else cut(c) for c in codes)
        return _run_group(qt, kt, vt, plan, tiles, group, chunk_codes, width)

    out = jax.lax.map(chunk, jax.lax.iota(jnp.int32, chunks))  # [chunks, B, H, rows, BQ, D]
    b, h, _, bq, d = qt.shape
    out = jnp.transpose(out, (1, 2, 0, 3, 4, 5)).reshape(b, h, chunks * rows, bq, d)
    return out[:, :, :g]


@functools.partial(jax.jit, static_argnames=("plan", "visits", "score_elements", "width"))
def _blocksparse(q, k, v, *, plan: TilePlan, visits: VisitGroups, score_elements: int, width: int):
    b, n, h, d = q.shape
    bq, bkv = plan.block_sizes.block_q, plan.block_sizes.block_kv
    nq, nkv = plan.num_q_tiles, plan.num_kv_tiles
    scale = 1.0 / np.sqrt(d)

    def tiled(x, tiles: int, rows: int, order: tuple[int, ...]):
        # Padded in its own [B, N, H, D] layout, then split into tiles and transposed in one go
        # (XLA:CPU fuses both into one copy; transposing first kept a second, padded copy).
        x = jnp.pad(x, ((0, 0), (0, tiles * rows - n), (0, 0), (0, 0)))
        return jnp.transpose(x.reshape(b, tiles, rows, h, d), order)

    qt = tiled((q.astype(jnp.float32) * scale).astype(q.dtype), nq, bq, (0, 3, 1, 2, 4))
    # K and V tile-first, [nkv, B, H, BKV, D]: a step's gathered tiles then lead their layout.
    kt, vt = (tiled(x, nkv, bkv, (1, 0, 3, 2, 4)) for x in (k, v))
    outs = []
    for group in visits.groups:
        rows = query_tiles_per_step(score_elements, b * h * bq * bkv * width, group.q_tiles.size)
        if rows == group.q_tiles.size:
            outs.append(_group_out(qt, kt, vt, plan, group.q_tiles, group, width))
        else:
            outs.append(_chunked_group_out(qt, kt, vt, plan, group, rows, width))
    out = jnp.concatenate(outs, axis=2) if len(outs) > 1 else outs[0]
    out = take_tiles(out, _tile_constant(visits.restore), axis=2).reshape(b, h, nq * bq, d)[
        :, :, :n
    ]
    return jnp.transpose(out, (0, 2, 1, 3)).astype(q.dtype)


def blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    plan: TilePlan,
    *,
    max_groups: int = 8,
    score_elements: int = FLASH_SCORE_ELEMENTS,
    tiles_per_step: int | None = None,
) -> jax.Array:
    """Runs a TilePlan with the XLA online-softmax scans.

    Inputs are assumed validated by ``kernels.executors.dispatch.attention``.

    Args:
        q: [batch, tokens, heads, head_dim] (float32 or bfloat16).
        k: [batch, tokens, heads, head_dim].
        v: [batch, tokens, heads, head_dim].
        plan: the tile plan for this sequence.
        max_groups: bound on query-tile groups (see ``visit_groups``).
        score_elements: float32 scores one scan step may hold, B * H * (query tiles) * BQ * BKV
            * tiles_per_step; a group with more query tiles than that allows is scanned a chunk
            at a time.
        tiles_per_step: listed tiles each scan step runs as one matmul (a wide step); default
            ``wide_step_tiles``. Any width gives the same result up to float rounding.

    Returns:
        [batch, tokens, heads, head_dim] in q's dtype: softmax(q k^T / sqrt(d), masked) v.
    """
    b, _, h, _ = q.shape
    bq, bkv = plan.block_sizes.block_q, plan.block_sizes.block_kv
    if tiles_per_step is None:
        tiles_per_step = wide_step_tiles(bq, bkv, b * h, plan.num_kv_tiles, score_elements)
    if (
        isinstance(tiles_per_step, bool)
        or not isinstance(tiles_per_step, int)
        or tiles_per_step < 1
    ):
        raise ValueError(f"tiles_per_step={tiles_per_step!r}: expected a positive int")
    return _blocksparse(
        q,
        k,
        v,
        plan=plan,
        visits=visit_groups(plan, max_groups),
        score_elements=score_elements,
        width=tiles_per_step,
    )
