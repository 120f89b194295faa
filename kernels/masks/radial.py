"""Radial Attention: a static mask whose spatial window shrinks as frames grow apart.

Radial Attention (Li et al., "Radial Attention: O(n log n) sparse attention with energy decay for
long video generation", arXiv 2506.19852; mit-han-lab/radial-attention, ``radial_attn/attn_mask.py``,
Wan path) keeps, between a query in frame i and a key in frame j (positions r and c inside their
frames, S tokens per frame, frame-major order):

- every key of frame 0 (attention to the first frame is kept);
- otherwise, with d = |i - j| and g = d.bit_length() (the band of distances 2^(g-1) <= d < 2^g):
  the frame pair is kept only when ``2^bitlen(S) / 2^g >= 128`` or d is a multiple of
  ``int(128 / (2^bitlen(S) / 2^g))`` (far bands keep only every few frames), and then the pair
  (r, c) is kept when ``|r - c| <= width(d)``: the whole frame for d <= 1, else
  ``2^bitlen(S) / 2^g * decay_factor``, at least 128 (``RADIAL_BLOCK``).

So the window halves with each doubling of the temporal distance, and the total is O(n log n)
pairs. The reference then turns the mask into 128 x 128 blocks with its own heuristic; here the
token-level mask is the definition and our tile rounding (``kernels.plans.rounding``) makes it
whole tiles. Its Wan script uses ``decay_factor=0.2`` with 12 dense steps (of 50) and 1 dense
layer.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from kernels.masks.band import band_kept_pairs
from kernels.masks.geometry import TokenGeometry
from kernels.masks.protocols import BlockSizesLike, PredicateMask

# The reference's block size, which is also its window floor and its frame-skipping threshold.
RADIAL_BLOCK = 128


def radial_frame_rule(
    distance: int, tokens_per_frame: int, decay_factor: float
) -> tuple[bool, int]:
    """Whether a frame pair at ``distance`` (key frame not 0) is kept, and its window in tokens.

    Args:
        distance: |i - j| >= 0 between query and key frame.
        tokens_per_frame: S.
        decay_factor: the window's scale (Radial's ``decay_factor``), > 0.

    Returns:
        (kept, width): pairs (r, c) of a kept frame pair are kept when |r - c| <= width.
    """
    top = 2 ** tokens_per_frame.bit_length()
    shrunk = top / 2 ** distance.bit_length()
    kept = shrunk >= RADIAL_BLOCK or distance % int(RADIAL_BLOCK / shrunk) == 0
    if distance <= 1:
        return kept, tokens_per_frame
    return kept, max(int(shrunk * decay_factor), RADIAL_BLOCK)


def _pairs_within(r0, length_q, c0, length_k, width):
    """Pairs (r, c), r in [r0, r0 + length_q), c in [c0, c0 + length_k), with |r - c| <= width."""

    def at_most(d):  # pairs with c - r <= d: sum over r of clip(r + d + 1 - c0, 0, length_k)
        def h(x):  # sum_{t < x} clip(t, 0, L)
            x = np.maximum(x, 0)
            inside = np.minimum(x, length_k + 1)
            return inside * (inside - 1) // 2 + length_k * (x - inside)

        x0 = r0 + d + 1 - c0
        return h(x0 + length_q) - h(x0)

    return at_most(width) - at_most(-width - 1)


def _pieces(tokens: int, per_frame: int, block: int):
    """Cuts [0, N) at every block and frame boundary: (block, frame, first position in frame,
    length) per piece, in token order."""
    cuts = np.union1d(np.arange(0, tokens, block), np.arange(0, tokens, per_frame))
    lengths = np.diff(np.append(cuts, tokens))
    return cuts // block, cuts // per_frame, cuts % per_frame, lengths


@dataclasses.dataclass(frozen=True)
class RadialMask(PredicateMask):
    """Radial Attention's mask over frame-major token indices.

    Attributes:
        geometry: token geometry.
        decay_factor: the window's scale (Radial's ``decay_factor``), > 0.
    """

    geometry: TokenGeometry
    decay_factor: float

    def __post_init__(self) -> None:
        value = self.decay_factor
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"RadialMask.decay_factor={value!r}: expected a positive number")
        object.__setattr__(self, "decay_factor", float(value))

    @property
    def tokens(self) -> int:
        """N."""
        return self.geometry.tokens

    @functools.cached_property
    def rules(self) -> tuple[np.ndarray, np.ndarray]:
        """(kept bool [F], width int64 [F]) per frame distance (key frames other than 0)."""
        per_frame = self.geometry.tokens_per_frame
        rules = [
            radial_frame_rule(d, per_frame, self.decay_factor) for d in range(self.geometry.frames)
        ]
        return np.array([k for k, _ in rules]), np.array([w for _, w in rules], dtype=np.int64)

    def allowed(self, q, k):
        """Predicate on broadcastable frame-major index arrays (NumPy, or jnp when traced)."""
        kept, width = self.rules
        if isinstance(q, np.ndarray | int) and isinstance(k, np.ndarray | int):
            q, k = np.asarray(q), np.asarray(k)
        else:
            import jax.numpy as jnp

            kept, width = jnp.asarray(kept), jnp.asarray(width)
        s = self.geometry.tokens_per_frame
        fq, fk = q // s, k // s
        d = abs(fq - fk).clip(0, self.geometry.frames - 1)
        near = abs((q - fq * s) - (k - fk * s)) <= width[d]
        return ((fk == 0) | (kept[d] & near)) & (k < self.tokens)

    @property
    def kept_pairs(self) -> int:
        """Exact kept pairs: frame 0 for every query frame, plus each kept frame pair's band."""
        f, s = self.geometry.frames, self.geometry.tokens_per_frame
        kept, width = self.rules
        total = f * s * s
        for d in range(f):
            pairs = f - 1 if d == 0 else 2 * (f - d) - 1  # (i, j) with |i - j| = d and j >= 1
            if kept[d] and pairs > 0:
                total += pairs * band_kept_pairs(s, int(width[d]), 0)
        return total

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """int64 [nq, nkv]: kept real pairs per kernel tile (exact, per block-and-frame piece)."""
        n, s = self.tokens, self.geometry.tokens_per_frame
        kept, width = self.rules
        qb, qf, qr, ql = (x[:, None] for x in _pieces(n, s, block_sizes.block_q))
        kb, kf, kr, kl = (x[None, :] for x in _pieces(n, s, block_sizes.block_kv))
        d = np.abs(qf - kf)
        band = _pairs_within(qr, ql, kr, kl, width[d])
        pairs = np.where(kf == 0, ql * kl, np.where(kept[d], band, 0))
        rows = np.flatnonzero(np.r_[True, qb[1:, 0] != qb[:-1, 0]])
        cols = np.flatnonzero(np.r_[True, kb[0, 1:] != kb[0, :-1]])
        return np.add.reduceat(np.add.reduceat(pairs, rows, axis=0), cols, axis=1)


def radial_mask(geometry: TokenGeometry, decay_factor: float) -> RadialMask:
    """Radial Attention's mask at ``geometry`` for ``decay_factor``."""
    return RadialMask(geometry, float(decay_factor))
