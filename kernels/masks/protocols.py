"""What the layers above expect of a mask, of block sizes and of a tile plan, as Protocols, and
the methods every mask derives from its predicate.

Masks are the lowest layer, so these describe plans and block sizes structurally instead of
importing them: ``kernels.plans.block_sizes.BlockSizes`` is a ``BlockSizesLike`` and
``kernels.plans.tiles.TilePlan`` a ``TilePlanLike``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


class BlockSizesLike(Protocol):
    """Tile sizes: query rows (BQ) and key/value rows (BKV) per tile."""

    @property
    def block_q(self) -> int: ...

    @property
    def block_kv(self) -> int: ...


@runtime_checkable
class Mask(Protocol):
    """An attention mask over (query, key) token indices of an N-token sequence.

    Keys at or beyond ``tokens`` are padding and never allowed. ``allowed`` is written with plain
    operators so it runs on NumPy arrays on the host and on jnp arrays inside a kernel.
    """

    @property
    def tokens(self) -> int:
        """Sequence length N."""
        ...

    @property
    def kept_pairs(self) -> int:
        """Allowed (q, k) pairs within the N x N sequence."""
        ...

    @property
    def density(self) -> float:
        """``kept_pairs / N**2``."""
        ...

    def allowed(self, q: Any, k: Any) -> Any:
        """bool predicate on broadcastable integer index arrays (NumPy or jnp)."""
        ...

    def dense(self) -> np.ndarray:
        """bool [N, N] (small N only)."""
        ...

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: allowed real pairs in each BQ x BKV tile."""
        ...


class PredicateMask:
    """What every mask derives from ``tokens``, ``kept_pairs`` and ``allowed``: its density and its
    dense matrix. Concrete masks inherit these instead of writing them again."""

    @property
    def density(self) -> float:
        """Kept fraction of the N^2 real pairs: ``kept_pairs / N**2``."""
        return self.kept_pairs / self.tokens**2

    def dense(self) -> np.ndarray:
        """bool [N, N] from ``allowed`` (small N only: the oracle's mask)."""
        idx = np.arange(self.tokens)
        return self.allowed(idx[:, None], idx[None, :])


class BandLike(Protocol):
    """A band-plus-sink mask measured along ``coordinates`` (``BandMask``, ``StridedTemporalMask``):
    |c(q) - c(k)| <= half_width, or c(k) < sink, for a ``coordinates`` map c that is a permutation
    of ``range(tokens)``."""

    @property
    def tokens(self) -> int: ...

    @property
    def half_width(self) -> int: ...

    @property
    def sink(self) -> int: ...

    def coordinates(self, index: np.ndarray) -> np.ndarray: ...


class MaskLike(Protocol):
    """What a kernel evaluates inside a tile: ``allowed(q, k)`` on int arrays, keys >= tokens out."""

    @property
    def tokens(self) -> int: ...

    def allowed(self, q: Any, k: Any) -> Any: ...


class TilePlanLike(Protocol):
    """What an executor reads from a tile plan (``kernels.plans.tiles.TilePlan``)."""

    full_kv: np.ndarray
    full_count: np.ndarray
    partial_kv: np.ndarray
    partial_count: np.ndarray
    mask: MaskLike
    tokens: int
    block_sizes: Any
