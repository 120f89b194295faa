"""Brute-force mask statistics the mask and tile tests compare against."""

import numpy as np


def brute_tile_counts(mask, block_sizes) -> np.ndarray:
    """int64 [nq, nkv]: kept pairs per tile, counted from ``mask.dense()`` (small N only)."""
    dense = mask.dense()
    n = mask.tokens
    bq, bkv = block_sizes.block_q, block_sizes.block_kv
    nq, nkv = -(-n // bq), -(-n // bkv)
    padded = np.zeros((nq * bq, nkv * bkv), dtype=np.int64)
    padded[:n, :n] = dense
    return padded.reshape(nq, bq, nkv, bkv).sum(axis=(1, 3))
