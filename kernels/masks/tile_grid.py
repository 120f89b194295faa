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


def band_tile_counts(mask: BandLike, block_sizes: BlockSizesLike) -> np.ndarray:
    """Kept real pairs per tile of a band-plus-sink mask (exact, O(N) memory).

    For each key tile, sorting its keys' coordinates turns "keys within w of this query" into two
    binary searches per query; the sink keys (whose coordinates equal their index) are counted the
    same way to remove the band/sink overlap.

    Args:
        mask: the band, measured along ``mask.coordinates``.
        block_sizes: tile sizes.

    Returns:
        int64 [nq, nkv].
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
        sink = np.sort(np.asarray(mask.coordinates(keys[keys < mask.sink])))
        overlap = np.searchsorted(sink, high, "right") - np.searchsorted(sink, low, "left")
        counts[:, j] = np.add.reduceat(band + sink.size - overlap, starts)
    return counts
