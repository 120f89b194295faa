"""Tile-grid arithmetic: how BQ x BKV tiles cover an N x N attention matrix, and band counts per tile.

A tile is one (query tile, key/value tile) pair of BQ x BKV token pairs; the last tile on each axis
may reach past the sequence end (padding). Masks count their kept pairs per tile with these helpers
(``Mask.tile_counts``), and tile plans classify tiles with them, so they live at the lowest layer and
take block sizes duck-typed (anything with ``block_q`` and ``block_kv``).
"""

from __future__ import annotations

import numpy as np

from kernels.masks.protocols import BandLike, BlockSizesLike


def tile_grid(tokens: int, block_sizes: BlockSizesLike) -> tuple[int, int]:
    """(num_q_tiles, num_kv_tiles) covering ``tokens`` with padding at the end."""
    return -(-tokens // block_sizes.block_q), -(-tokens // block_sizes.block_kv)


def tile_areas(tokens: int, block_sizes: BlockSizesLike) -> np.ndarray:
    """int64 [nq, nkv]: real (unpadded) token pairs in each tile."""
    nq, nkv = tile_grid(tokens, block_sizes)
    bq, bkv = block_sizes.block_q, block_sizes.block_kv
    rows = np.minimum(tokens, (np.arange(nq) + 1) * bq) - np.arange(nq) * bq
    cols = np.minimum(tokens, (np.arange(nkv) + 1) * bkv) - np.arange(nkv) * bkv
    return rows[:, None].astype(np.int64) * cols[None, :]


def padding_tiles(tokens: int, block_sizes: BlockSizesLike) -> np.ndarray:
    """bool [nq, nkv]: tiles reaching past the sequence end on either axis."""
    nq, nkv = tile_grid(tokens, block_sizes)
    q_pad = (np.arange(nq) + 1) * block_sizes.block_q > tokens
    k_pad = (np.arange(nkv) + 1) * block_sizes.block_kv > tokens
    return q_pad[:, None] | k_pad[None, :]


def _reference_band_tile_counts(mask: BandLike, block_sizes: BlockSizesLike) -> np.ndarray:
    """Reference for ``band_tile_counts``: per key tile, sort and binary-search every query.

    O(N * num_kv_tiles) time; kept to test the closed-form version against.
    """
    n, w = mask.tokens, mask.half_width
    bq, bkv = block_sizes.block_q, block_sizes.block_kv
    nq, nkv = tile_grid(n, block_sizes)
    q_coord = np.asarray(mask.coordinates(np.arange(n, dtype=np.int64)))
    low, high = q_coord - w, q_coord + w
    counts = np.zeros((nq, nkv), dtype=np.int64)
    starts = np.arange(nq) * bq
    for j in range(nkv):
        keys = np.arange(j * bkv, min((j + 1) * bkv, n), dtype=np.int64)
        coord = np.sort(np.asarray(mask.coordinates(keys)))
        band = np.searchsorted(coord, high, "right") - np.searchsorted(coord, low, "left")
        sink = coord[coord < mask.sink]
        overlap = np.searchsorted(sink, high, "right") - np.searchsorted(sink, low, "left")
        counts[:, j] = np.add.reduceat(band + sink.size - overlap, starts)
    return counts


def _runs(coord: np.ndarray) -> list[tuple[int, int, int]] | None:
    """Splits the index range into maximal runs whose coordinates form arithmetic progressions.

    Returns (start, stop, step) per run (a one-token run has step 1), or None when there are many.
    """
    n = coord.size
    if n == 1:
        return [(0, 1, 1)]
    diff = np.diff(coord)
    change = np.flatnonzero(diff[1:] != diff[:-1]) + 1  # diff index where a new step begins
    ends = np.concatenate([change, [diff.size]])  # end (exclusive) of each constant-step diff run
    if ends.size > max(64, n // 64):
        return None
    runs, i = [], 0
    while i < n:
        if i == n - 1:
            runs.append((i, n, 1))
            break
        e = int(ends[np.searchsorted(ends, i, "right")])  # diffs i..e-1 share diff[i]
        runs.append((i, e + 1, int(diff[i])))
        i = e + 1
    return runs


def _sink_runs(coord: np.ndarray, runs: list[tuple[int, int, int]], sink: int):
    """The part of each run whose coordinates are below ``sink`` (the sink keys).

    A run's coordinates are monotone, so that part is a prefix (increasing) or a suffix
    (decreasing) of the run, itself a run.
    """
    out = []
    for start, stop, step in runs:
        inside = np.flatnonzero(coord[start:stop] < sink)
        if inside.size:
            out.append((start + int(inside[0]), start + int(inside[-1]) + 1, step))
    return out


def _segments(coord, runs, tile, limit):
    """Cuts [0, limit) into (tile, base, step, length) pieces: one tile, one arithmetic run.

    The base is the smallest coordinate of the piece and the step is positive (a decreasing run is
    the same set read backwards); one-token pieces get step 1.
    """
    tiles, bases, steps, lengths = [], [], [], []
    for start, stop, step in runs:
        stop = min(stop, limit)
        if start >= stop:
            continue
        cuts = np.arange((start // tile + 1) * tile, stop, tile)
        lo = np.concatenate([[start], cuts])
        hi = np.concatenate([cuts, [stop]])
        length = hi - lo
        first, last = coord[lo], coord[hi - 1]
        tiles.append(lo // tile)
        bases.append(np.minimum(first, last))
        steps.append(np.where(length > 1, abs(step), 1))
        lengths.append(length)
    if not tiles:
        return tuple(np.zeros(0, np.int64) for _ in range(4))
    cat = [np.concatenate(x).astype(np.int64) for x in (tiles, bases, steps, lengths)]
    order = np.argsort(cat[0], kind="stable")
    return tuple(x[order] for x in cat)


def _sum_relu(k, step, length):
    """sum_{u=0}^{length-1} max(k - step * u, 0), elementwise (closed form)."""
    m = np.clip(-((-k) // step), 0, length)
    return m * k - step * (m * (m - 1) // 2)


def _interval_hits(k_lo, k_hi, w, base, step, length):
    """sum over the progression c = base + step*u, u < length, of |[k_lo, k_hi) cap [c-w, c+w]|."""
    total = _sum_relu(k_hi - base + w, step, length) - _sum_relu(k_lo - base + w, step, length)
    total -= _sum_relu(k_hi - base - w - 1, step, length)
    return total + _sum_relu(k_lo - base - w - 1, step, length)


def _pair_counts(q_seg, k_seg, w: int, shape: tuple[int, int]) -> np.ndarray:
    """int64 [nq, nkv]: pairs (q, k) with |c(q) - c(k)| <= w between every two pieces, per tile."""
    q_tile, q_base, q_step, q_len = q_seg
    k_tile, k_base, k_step, k_len = k_seg
    out = np.zeros(shape, dtype=np.int64)
    if k_tile.size == 0:
        return out
    k_starts = np.flatnonzero(np.r_[True, k_tile[1:] != k_tile[:-1]])
    k_cols = k_tile[k_starts]
    chunk = max(1, (1 << 21) // k_tile.size)
    for a in range(0, q_tile.size, chunk):
        qb, qs, ql = (x[a : a + chunk, None] for x in (q_base, q_step, q_len))
        kb, ks, kl = k_base[None, :], k_step[None, :], k_len[None, :]
        # Keys contiguous in coordinates: sum over the queries' progression.
        pairs = np.where(ks == 1, _interval_hits(kb, kb + kl, w, qb, qs, ql), 0)
        # Queries contiguous, keys strided: the same count with the roles swapped.
        swap = (ks > 1) & (qs == 1)
        if swap.any():
            pairs += np.where(swap, _interval_hits(qb, qb + ql, w, kb, ks, kl), 0)
        # Both strided with one step s: q - k = d + s (u - v); count u - v in [lo, hi].
        both = (ks > 1) & (qs > 1)
        if not both.any():
            _accumulate(out, q_tile[a : a + chunk], k_starts, k_cols, pairs)
            continue
        s = np.where(both, qs, 1)
        d = qb - kb
        lo, hi = -((w + d) // s), (w - d) // s
        width = np.maximum(hi - lo + 1, 0)
        same = (
            _sum_relu(kl + hi, 1, ql)
            - _sum_relu(hi, 1, ql)
            - _sum_relu(kl + hi - width, 1, ql)
            + _sum_relu(hi - width, 1, ql)
        )
        pairs += np.where(both, same, 0)
        _accumulate(out, q_tile[a : a + chunk], k_starts, k_cols, pairs)
    return out


def _accumulate(out, rows, k_starts, k_cols, pairs) -> None:
    """Adds piece-pair counts into their tiles (pieces sorted by tile)."""
    r_starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    summed = np.add.reduceat(np.add.reduceat(pairs, r_starts, axis=0), k_starts, axis=1)
    out[np.ix_(rows[r_starts], k_cols)] += summed


def band_tile_counts(mask: BandLike, block_sizes: BlockSizesLike) -> np.ndarray:
    """Kept real pairs per tile of a band-plus-sink mask (exact, closed form).

    The coordinates of a tile's tokens split into a few arithmetic progressions (one for a
    frame-major band; one per frame for the strided temporal band), and the number of pairs within
    ``w`` of each other between two progressions has a closed form, so the work is one vectorised
    pass over pairs of such pieces instead of a binary search per token and key tile. The sink keys
    (coordinates below ``mask.sink``) are counted the same way to remove the band/sink overlap.
    Coordinates that are not piecewise progressions of one step fall back to the reference.

    Args:
        mask: the band, measured along ``mask.coordinates``.
        block_sizes: tile sizes.

    Returns:
        int64 [nq, nkv], equal to ``_reference_band_tile_counts``.
    """
    n, w = mask.tokens, mask.half_width
    bq, bkv = block_sizes.block_q, block_sizes.block_kv
    nq, nkv = tile_grid(n, block_sizes)
    coord = np.asarray(mask.coordinates(np.arange(n, dtype=np.int64))).astype(np.int64)
    runs = _runs(coord)
    if runs is None or len({abs(step) for *_, step in runs} | {1}) > 2:
        return _reference_band_tile_counts(mask, block_sizes)
    q_seg = _segments(coord, runs, bq, n)
    band = _pair_counts(q_seg, _segments(coord, runs, bkv, n), w, (nq, nkv))
    rows = np.minimum(n, (np.arange(nq) + 1) * bq) - np.arange(nq) * bq
    sink_keys = np.add.reduceat((coord < mask.sink).astype(np.int64), np.arange(nkv) * bkv)
    sink_seg = _segments(coord, _sink_runs(coord, runs, mask.sink), bkv, n)
    overlap = _pair_counts(q_seg, sink_seg, w, (nq, nkv))
    return band + rows[:, None].astype(np.int64) * sink_keys[None, :] - overlap
