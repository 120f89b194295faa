"""SVG attention masks as predicates over (query, key) token indices.

Every mask here is a frozen, hashable description with a vectorised predicate ``allowed(q, k)``
written with plain operators, so the same code runs on NumPy arrays (host-side tile classification,
dense oracle masks) and on jnp arrays inside a kernel (intra-tile masking from iota indices). Keys at
or beyond ``tokens`` are sequence padding and never allowed. Each implements the ``Mask`` protocol
(``kernels.masks.protocols``), counting its own kept pairs per tile with ``tile_counts``.

Both SVG head types use one mask, ``BandMask``: |q - k| <= w, or k < S (the sink). A spatial head
applies it in frame-major order, where the sink is frame 0; a temporal head applies it in the temporal
layout of ``kernels.masks.layouts`` (SVG's (Hp, Wp, F) order), where the sink is the first S positions
of that layout, as in SVG's code; so the two are the same object. ``StridedTemporalMask`` is the
temporal mask seen in frame-major order (stripes), for kernels that evaluate it in place instead of
permuting.

Sparse VideoGen states a band by its ``sparsity``: the band's kept fraction without the sink, whose
half-width ``N (1 - sqrt(1 - s))`` it rounds up to a multiple of 128 tokens
(``svg_half_width``, ``band_for_svg_sparsity``); ours by the exact kept fraction, sink included
(``band_for_density``).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position
from kernels.masks.protocols import BlockSizesLike, PredicateMask
from kernels.masks.tile_grid import band_tile_counts, tile_areas


def _check_int(owner: str, name: str, value, low: int, high: int | None = None) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise ValueError(f"{owner}.{name}={value!r}: expected an int")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{owner}.{name}={value}: expected a value in {bound}")


def band_kept_pairs(tokens: int, half_width: int, sink: int) -> int:
    """Exact number of allowed (q, k) pairs of a band-plus-sink mask (overlap counted once).

    Args:
        tokens: N.
        half_width: w.
        sink: number of leading keys every query sees.

    Returns:
        |{(q, k) in [0, N)^2 : |q - k| <= w or k < sink}|.
    """
    n, w = tokens, min(half_width, tokens - 1)
    band = n + 2 * (w * n - w * (w + 1) // 2)
    k = np.arange(sink, dtype=np.int64)
    overlap = int(np.sum(np.minimum(n - 1, k + w) - np.maximum(0, k - w) + 1))
    return band + n * sink - overlap


@dataclasses.dataclass(frozen=True)
class BandMask(PredicateMask):
    """|q - k| <= half_width, or k < sink; keys >= tokens are padding.

    Attributes:
        tokens: sequence length N.
        half_width: band half-width w (0 keeps the diagonal).
        sink: leading keys every query attends to (S for SVG: frame 0 in frame-major order).
    """

    tokens: int
    half_width: int
    sink: int

    def __post_init__(self) -> None:
        _check_int("BandMask", "tokens", self.tokens, 1)
        _check_int("BandMask", "half_width", self.half_width, 0)
        _check_int("BandMask", "sink", self.sink, 0, self.tokens)

    def allowed(self, q, k):
        """Predicate on broadcastable integer index arrays (NumPy or jnp).

        Args:
            q: query token indices.
            k: key token indices.

        Returns:
            bool array of the broadcast shape.
        """
        return ((abs(q - k) <= self.half_width) | (k < self.sink)) & (k < self.tokens)

    @property
    def kept_pairs(self) -> int:
        """Exact allowed pairs within the N x N sequence."""
        return band_kept_pairs(self.tokens, self.half_width, self.sink)

    def coordinates(self, index: np.ndarray) -> np.ndarray:
        """Position along which the band is measured (the index itself)."""
        return index

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: kept real pairs per tile (exact, O(N) memory)."""
        return band_tile_counts(self, block_sizes)


@dataclasses.dataclass(frozen=True)
class StridedTemporalMask(PredicateMask):
    """The temporal band evaluated in frame-major order: |t(q) - t(k)| <= w, or t(k) < S.

    ``t`` is the temporal-layout position (``kernels.masks.layouts.temporal_position``). Equivalent to
    permuting to the temporal layout, applying ``BandMask(N, w, S)`` and permuting back; its sink is
    the temporal layout's first S positions (the top S / F spatial positions of every frame).

    Attributes:
        geometry: token geometry.
        half_width: band half-width w in the temporal layout.
    """

    geometry: TokenGeometry
    half_width: int

    def __post_init__(self) -> None:
        _check_int("StridedTemporalMask", "half_width", self.half_width, 0)

    @property
    def tokens(self) -> int:
        """N."""
        return self.geometry.tokens

    @property
    def sink(self) -> int:
        """S: keys whose temporal-layout position is below it are the sink."""
        return self.geometry.tokens_per_frame

    def coordinates(self, index):
        """Temporal-layout position of frame-major indices (NumPy or jnp)."""
        return temporal_position(index, self.geometry)

    def allowed(self, q, k):
        """Predicate on broadcastable frame-major index arrays (NumPy or jnp)."""
        key = self.coordinates(k)
        near = abs(self.coordinates(q) - key) <= self.half_width
        return (near | (key < self.sink)) & (k < self.tokens)

    @property
    def kept_pairs(self) -> int:
        """Exact allowed pairs (a permutation of the band's pairs)."""
        return band_kept_pairs(self.tokens, self.half_width, self.sink)

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: kept real pairs per tile, the band counted along ``coordinates``."""
        return band_tile_counts(self, block_sizes)


@dataclasses.dataclass(frozen=True)
class PaddingMask:
    """Dense attention: every real key is allowed; only keys >= tokens (padding) are masked.

    Attributes:
        tokens: sequence length N.
    """

    tokens: int

    def __post_init__(self) -> None:
        _check_int("PaddingMask", "tokens", self.tokens, 1)

    def allowed(self, q, k):
        """Predicate on broadcastable integer index arrays (NumPy or jnp)."""
        return (k < self.tokens) | (q < 0)  # `| (q < 0)` broadcasts to the pair shape

    @property
    def kept_pairs(self) -> int:
        """N^2."""
        return self.tokens**2

    @property
    def density(self) -> float:
        """1.0."""
        return 1.0

    def dense(self) -> np.ndarray:
        """bool [N, N] of ones (small N only)."""
        return np.ones((self.tokens, self.tokens), dtype=bool)

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: every real pair of each tile."""
        return tile_areas(self.tokens, block_sizes)


@functools.lru_cache(maxsize=256)
def _band_for(tokens: int, sink: int, density: float) -> BandMask:
    target = density * tokens * tokens
    lo, hi = 0, tokens - 1  # kept_pairs is non-decreasing in w; find the first w reaching target
    while lo < hi:
        mid = (lo + hi) // 2
        if band_kept_pairs(tokens, mid, sink) >= target:
            hi = mid
        else:
            lo = mid + 1
    candidates = [w for w in (lo - 1, lo) if w >= 0]
    best = min(candidates, key=lambda w: abs(band_kept_pairs(tokens, w, sink) - target))
    return BandMask(tokens, best, sink)


def band_for_density(geometry: TokenGeometry, density: float) -> BandMask:
    """The SVG band-plus-sink mask whose exact kept fraction is closest to ``density``.

    The sink is frame 0 (S tokens). The same mask serves spatial heads (frame-major order) and
    temporal heads (temporal layout). The exact achieved density is ``mask.density``; it can exceed
    the target when the target is below what the diagonal plus sink already keep.

    Args:
        geometry: token geometry.
        density: target kept fraction in (0, 1].

    Returns:
        BandMask(tokens=N, half_width=w, sink=S).
    """
    if not isinstance(density, float | int) or not 0.0 < float(density) <= 1.0:
        raise ValueError(f"density={density!r}: expected a kept fraction in (0, 1], e.g. 0.3")
    return _band_for(geometry.tokens, geometry.tokens_per_frame, float(density))


def spatial_mask(geometry: TokenGeometry, density: float) -> BandMask:
    """Spatial-head mask (apply in frame-major order)."""
    return band_for_density(geometry, density)


def temporal_mask(geometry: TokenGeometry, density: float) -> BandMask:
    """Temporal-head mask (apply in the temporal layout; same band and sink as spatial)."""
    return band_for_density(geometry, density)


def strided_temporal_mask(geometry: TokenGeometry, density: float) -> StridedTemporalMask:
    """Temporal-head mask evaluated in frame-major order (no permutation)."""
    return StridedTemporalMask(geometry, band_for_density(geometry, density).half_width)


# Sparse VideoGen rounds its band's half-width up to a multiple of this many tokens.
SVG_WIDTH_MULTIPLE = 128


def svg_half_width(tokens: int, sparsity: float) -> int:
    """The band half-width Sparse VideoGen's Wan path uses for its ``sparsity`` setting.

    SVG's ``sparsity`` is the band's kept fraction without the sink: a band of half-width w keeps
    about ``1 - (1 - w / N)^2`` of the pairs, so it takes ``w = N (1 - sqrt(1 - s))`` and rounds it
    up to a multiple of ``SVG_WIDTH_MULTIPLE`` tokens (its ``sparsity_to_width`` and
    ``round_to_multiple``, with no text tokens in the self-attention).

    Args:
        tokens: sequence length N.
        sparsity: SVG's ``sparsity`` in (0, 1).

    Returns:
        The half-width w in tokens, at most N - 1.
    """
    if isinstance(sparsity, bool) or not isinstance(sparsity, float | int):
        raise ValueError(f"svg_sparsity={sparsity!r}: expected SVG's band fraction in (0, 1)")
    if not 0.0 < float(sparsity) < 1.0:
        raise ValueError(
            f"svg_sparsity={sparsity}: expected SVG's band fraction in (0, 1), e.g. 0.3 (its "
            "published Wan 720p setting)"
        )
    width = tokens * (1.0 - math.sqrt(1.0 - float(sparsity)))
    rounded = math.ceil(width / SVG_WIDTH_MULTIPLE) * SVG_WIDTH_MULTIPLE
    return min(int(rounded), tokens - 1)


def band_for_svg_sparsity(geometry: TokenGeometry, sparsity: float) -> BandMask:
    """The band-plus-sink mask Sparse VideoGen runs for its ``sparsity`` at this geometry.

    Its exact kept fraction (``mask.density``, the sink counted) is what our ``density`` names: at
    Wan 720p (21 x 45 x 80 tokens) SVG's published 0.3 keeps 0.340 of the pairs.

    Args:
        geometry: token geometry.
        sparsity: SVG's ``sparsity`` in (0, 1).

    Returns:
        BandMask(tokens=N, half_width=svg_half_width(N, sparsity), sink=S).
    """
    tokens = geometry.tokens
    return BandMask(tokens, svg_half_width(tokens, sparsity), geometry.tokens_per_frame)
