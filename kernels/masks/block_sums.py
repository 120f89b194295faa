"""Sums over contiguous token ranges of values that are constant on runs of tokens.

A static mask's kept pairs per kernel tile are sums over the tile's query and key tokens of a
value that depends only on which group (an STA tile, a frame) each token belongs to, and the
groups are contiguous, consecutive runs of tokens. ``group_block_sums`` adds such values over each
kernel tile without visiting tokens: a tile covers a few whole groups and parts of two at its
ends, so its sum is a difference of prefix sums over groups plus the two partial groups.
"""

from __future__ import annotations

import numpy as np


def group_block_sums(values: np.ndarray, starts: np.ndarray, block: int) -> np.ndarray:
    """Per block of ``block`` tokens, the sum over its tokens of their group's row of ``values``.

    Args:
        values: [groups, X], the value every token of a group contributes (int or float).
        starts: int [groups + 1], each group's first token; ``starts[-1]`` is the token count N,
            and the groups are consecutive (``starts`` increasing from 0).
        block: tokens per block; the last block may reach past N (its padding adds nothing).

    Returns:
        [ceil(N / block), X] in ``values``' dtype: row b sums tokens [b * block, (b + 1) * block).
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.diff(starts)
    if sizes.size != values.shape[0] or np.any(sizes < 1) or starts[0] != 0:
        raise ValueError(
            f"starts {starts.tolist()[:8]}...: expected {values.shape[0] + 1} increasing offsets "
            "from 0, one more than the groups in values"
        )
    tokens = int(starts[-1])
    lo = np.arange(0, tokens, block, dtype=np.int64)
    hi = np.minimum(lo + block, tokens)
    first = np.searchsorted(starts, lo, side="right") - 1  # group of each block's first token
    last = np.searchsorted(starts, hi - 1, side="right") - 1  # group of its last token
    weighted = values * sizes.reshape(-1, *([1] * (values.ndim - 1))).astype(values.dtype)
    prefix = np.concatenate([np.zeros_like(values[:1]), np.cumsum(weighted, axis=0)])
    inner = prefix[last] - prefix[np.minimum(first + 1, last)]  # whole groups strictly inside
    one = first == last
    head = np.where(one, hi - lo, starts[first + 1] - lo)[:, None]
    tail = np.where(one, 0, hi - starts[last])[:, None]
    return head * values[first] + tail * values[last] + np.where(one[:, None], 0, inner)
