"""The online-softmax scan steps of the XLA block-sparse executor, and how wide they are.

``kernels.executors.xla_blocksparse`` groups query tiles and calls ``scan_tiles`` once per visit
list (full tiles, then partial ones). A step gathers, for every query tile of the group, its next
listed K/V tile (a narrow step) or its next ``width`` listed tiles as one block of keys (a wide
step), and updates the running max, sum and accumulator (FlashAttention's recurrence). How many
query tiles share a step (``query_tiles_per_step``) and how many listed tiles a wide step takes
(``wide_step_tiles``) are set here, by measured rules.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels.executors.xla_flash import FLASH_SCORE_ELEMENTS
from kernels.executors.xla_visit_code import VisitCode, decoder


# Query tiles per scan step: all query tiles of a group advance together, but one step's float32
# scores, B * H * rows * BQ * BKV, are held near ``FLASH_SCORE_ELEMENTS`` (8 MiB, as the dense
# control "xla_flash" holds them), so a group of large tiles is scanned a chunk of query tiles at
# a time (768 x 768 tiles, 2 heads: one tile per step) instead of writing [B, H, N, BKV] scores per
# step, which costs CPU memory traffic per pair: B0 at 16,128 tokens on 768 x 768 tiles ran
# 1.2-1.5x faster on two CPU cores; small tiles (the CPU's 128 x 128) are unchanged.
def query_tiles_per_step(score_elements: int, pairs_per_row: int, g: int) -> int:
    """Query tiles per chunk of a g-tile group: as many as the score budget allows, balanced."""
    rows = max(1, score_elements // pairs_per_row)
    chunks = -(-g // rows)
    return -(-g // chunks)


# Wide steps: XLA:CPU's matmuls are faster on ~1,536 keys than on one 768-key tile. Measured on
# two CPU cores at 16,128 tokens, band density 0.39 (``evalharness.bench.dense_cpu``):
# B3's speedup over xla_flash, against the ideal 1 / executed pairs, was off by 1.16 at one
# 768-key tile per step and 1.02 at two (1.07 at three); 1.30 -> 1.20 for 512-key tiles at three;
# a 1,024-key tile gained nothing from two. Below 512 keys per tile a step is dominated by its
# small fusions, not its matmuls: at the default job's 128 x 128 tiles widths 2-8 were no faster.
WIDE_STEP_KEYS = 1536
WIDE_STEP_MIN_TILE = 512


def wide_step_tiles(
    block_q: int,
    block_kv: int,
    rows: int,
    kv_tiles: int,
    score_elements: int = FLASH_SCORE_ELEMENTS,
) -> int:
    """Listed tiles per scan step by default: about ``WIDE_STEP_KEYS`` keys, within the budget.

    Args:
        block_q: query tile rows.
        block_kv: key tile rows.
        rows: batch * heads.
        kv_tiles: key tiles of the sequence; no list is longer, so no step is wider.
        score_elements: the float32 scores a step may hold (B * H * BQ * keys per step); a width
            is kept only while one query tile's scores stay within about that (rounded).

    Returns:
        1 for tiles narrower than ``WIDE_STEP_MIN_TILE`` keys; else
        min(WIDE_STEP_KEYS // block_kv, round(score_elements / (rows * block_q * block_kv)),
        kv_tiles), at least 1.
    """
    if block_kv < WIDE_STEP_MIN_TILE:
        return 1
    by_budget = round(score_elements / (rows * block_q * block_kv))
    return max(1, min(WIDE_STEP_KEYS // block_kv, by_budget, kv_tiles))


def take_tiles(x: jax.Array, index: jax.Array, axis: int) -> jax.Array:
    """``jnp.take(x, index, axis)`` for tile indices known to be in range (all come from the plan).

    ``jnp.take``'s default fills out-of-range indices, a select over every gathered element that
    XLA:CPU runs as a fusion of its own per scan step; promising the range drops it.
    """
    where = (slice(None),) * axis + (index,)
    return x.at[where].get(mode="promise_in_bounds")


def scan_tiles(
    state, q_tiles, k_tiles, v_tiles, visits: VisitCode, masked_by, q_index, code=None, width=1
):
    """Online-softmax scan over one visit list, ``width`` listed tiles per step.

    Inside the scan the query tiles' axis g leads ([g, B, H, ...]), as the gathered K/V tiles'
    does: with g behind the batch and head axes, XLA:CPU wrote every step's scores twice (the
    matmul's output, then a copy into the einsum's layout: 6% of B3 at 16,128 tokens on 768 x 768
    tiles).

    A wide step gathers ``width`` consecutive entries of every row's list and runs one matmul over
    their width * BKV keys (XLA:CPU's matmuls are faster on wide key blocks than on several narrow
    ones). The list's last ``steps % width`` entries run one tile per step after the wide steps,
    so no tile is computed twice or padded in; a padded entry inside a wide step is masked out key
    by key, a padded single step leaves the state untouched.

    Args:
        state: (running max [B,H,g,BQ], running sum [B,H,g,BQ], acc [B,H,g,BQ,D]) float32.
        q_tiles: [B,H,g,BQ,D], pre-scaled.
        k_tiles, v_tiles: [nkv,B,H,BKV,D], tile axis first.
        visits: the static visit list [g, L], decoded one step at a time (see ``xla_visit_code``).
        masked_by: mask whose ``allowed`` is evaluated per tile, or None (mask-free path).
        q_index: int32 [g, BQ] token index of every query row (used when masked).
        code: int32 [g, C], the rows of ``visits.code`` these query tiles use, when they are a
            chunk of the list's rows; None for all of them.
        width: listed tiles per wide step (>= 1).

    Returns:
        The updated state, in ``state``'s layout.
    """
    decode = decoder(visits, code)
    q_first = jnp.moveaxis(q_tiles, 2, 0)  # [g,B,H,BQ,D]
    wide = visits.steps // width if width > 1 else 0
    state = tuple(jnp.moveaxis(x, 2, 0) for x in state)
    if wide:
        step = functools.partial(
            _wide_step, q_first, k_tiles, v_tiles, decode, masked_by, q_index, width
        )
        state, _ = jax.lax.scan(step, state, jax.lax.iota(jnp.int32, wide))
    if visits.steps > wide * width:
        step = functools.partial(
            _narrow_step, q_first, k_tiles, v_tiles, decode, masked_by, q_index
        )
        positions = wide * width + jax.lax.iota(jnp.int32, visits.steps - wide * width)
        state, _ = jax.lax.scan(step, state, positions)
    return tuple(jnp.moveaxis(x, 0, 2) for x in state)


def _online_update(carry, q_first, k_blk, v_blk, keep):
    """One online-softmax update of [g,B,H,BQ] rows by the keys of k_blk / v_blk [g,B,H,K,D].

    ``keep`` is a bool mask broadcastable to the scores [g,B,H,BQ,K], or None (no masking).
    """
    m, total, acc = carry
    s = jnp.einsum("gbhqd,gbhkd->gbhqk", q_first, k_blk, preferred_element_type=jnp.float32)
    if keep is not None:
        s = jnp.where(keep, s, -jnp.inf)
    m_new = jnp.maximum(m, s.max(axis=-1))
    # A row with nothing kept so far has m_new = -inf; shifting by 0 keeps exp() at 0.
    m_new_safe = m_new if keep is None else jnp.where(jnp.isneginf(m_new), 0.0, m_new)
    alpha = jnp.exp(m - m_new_safe)
    p = jnp.exp(s - m_new_safe[..., None])
    total_new = alpha * total + p.sum(axis=-1)
    pv = jnp.einsum(
        "gbhqk,gbhkd->gbhqd", p.astype(v_blk.dtype), v_blk, preferred_element_type=jnp.float32
    )
    return m_new, total_new, alpha[..., None] * acc + pv


def _tile_keys(masked_by, q_index, idx, bkv: int):
    """The mask over [g, BQ, len(idx[0]) * BKV] for tiles idx (int32 [g, w]), or None."""
    if masked_by is None:
        return None
    k_index = (idx[:, :, None] * bkv + jnp.arange(bkv, dtype=jnp.int32)).reshape(idx.shape[0], -1)
    return masked_by.allowed(q_index[:, :, None], k_index[:, None, :])


def _narrow_step(q_first, k_tiles, v_tiles, decode, masked_by, q_index, carry, j):
    """One listed tile per row: [g] tiles gathered, a padded entry leaves its row's state."""
    idx, ok = decode(j)
    k_blk = take_tiles(k_tiles, idx, axis=0)  # [g,B,H,BKV,D]
    v_blk = take_tiles(v_tiles, idx, axis=0)
    keep = _tile_keys(masked_by, q_index, idx[:, None], k_tiles.shape[3])
    new = _online_update(
        carry, q_first, k_blk, v_blk, None if keep is None else keep[:, None, None]
    )
    if ok is not None:
        ok = ok[:, None, None, None]  # padded list entries leave the state untouched
        new = (
            jnp.where(ok, new[0], carry[0]),
            jnp.where(ok, new[1], carry[1]),
            jnp.where(ok[..., None], new[2], carry[2]),
        )
    return new, None


def _wide_step(q_first, k_tiles, v_tiles, decode, masked_by, q_index, width, carry, j):
    """``width`` listed tiles per row, one matmul over their keys; padded entries masked."""
    _, b, h, bkv, d = k_tiles.shape
    decoded = [decode(j * width + t) for t in range(width)]
    idx = jnp.stack([index for index, _ in decoded], axis=1)  # [g, w]
    g = idx.shape[0]

    def gathered(tiles):
        x = take_tiles(tiles, idx, axis=0)  # [g, w, B, H, BKV, D]
        return jnp.moveaxis(x, 1, 3).reshape(g, b, h, width * bkv, d)

    keep = _tile_keys(masked_by, q_index, idx, bkv)  # [g, BQ, w * BKV] or None
    if decoded[0][1] is not None:
        ok = jnp.stack([valid for _, valid in decoded], axis=1)  # [g, w]
        ok = jnp.repeat(ok, bkv, axis=1)[:, None, :]
        keep = ok if keep is None else keep & ok
    keep = None if keep is None else keep[:, None, None]
    return _online_update(carry, q_first, gathered(k_tiles), gathered(v_tiles), keep), None
