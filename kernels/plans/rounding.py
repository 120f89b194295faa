"""Tile-aligned rounding of a mask (variant B3).

Every partial tile of the exact mask is either kept whole (the boundary rounded outward, adding the
tile's excluded pairs) or dropped (rounded inward, removing its kept pairs). The choice is a single
threshold on each tile's fill ratio (kept pairs / real pairs): tiles are taken in order of decreasing
fill until the kept-pair count is as close as possible to the exact mask's. Along every query-tile
row of a band the fill ratio falls monotonically from the band's centre outward, so the threshold
moves each band boundary to one tile edge, inward where the boundary tile is mostly empty and outward
where it is mostly kept. Afterwards the mask is a set of whole tiles: only tiles that touch the
sequence padding still need a predicate.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from kernels.masks.protocols import BlockSizesLike, Mask, PredicateMask
from kernels.masks.tile_grid import tile_areas
from kernels.plans.block_sizes import BlockSizes, same_tiles


@dataclasses.dataclass(frozen=True, eq=False)
class TileMask(PredicateMask):
    """A mask made of whole tiles: pair (q, k) is kept when its tile is kept and k < tokens.

    Attributes:
        tokens: sequence length N.
        block_sizes: the tiles the mask is aligned to.
        blocks: bool [num_q_tiles, num_kv_tiles], read-only.
        target_density: exact density of the mask that was rounded.
    """

    tokens: int
    block_sizes: BlockSizes
    blocks: np.ndarray
    target_density: float

    def allowed(self, q, k):
        """Predicate on broadcastable integer index arrays (NumPy, or jnp when traced)."""
        if isinstance(q, np.ndarray | int) and isinstance(k, np.ndarray | int):
            table = self.blocks
        else:
            import jax.numpy as jnp

            table = jnp.asarray(self.blocks)
        nq, nkv = self.blocks.shape
        qi = (q // self.block_sizes.block_q).clip(0, nq - 1)
        ki = (k // self.block_sizes.block_kv).clip(0, nkv - 1)
        return table[qi, ki] & (k < self.tokens)

    def tile_counts(self, block_sizes: BlockSizesLike) -> np.ndarray:
        """Kept real pairs per tile (only for the block sizes the mask is aligned to)."""
        if not same_tiles(block_sizes, self.block_sizes):
            raise ValueError(
                f"TileMask aligned to {self.block_sizes} cannot be tiled with {block_sizes}"
            )
        return np.where(self.blocks, tile_areas(self.tokens, block_sizes), 0)

    @property
    def kept_pairs(self) -> int:
        """Kept real pairs."""
        return int(self.tile_counts(self.block_sizes).sum())


@functools.lru_cache(maxsize=64)
def round_to_tiles(mask: Mask, block_sizes: BlockSizes, tolerance: float | None = 0.01) -> TileMask:
    """Rounds ``mask`` to whole tiles keeping about the same number of pairs.

    Args:
        mask: the exact mask (any ``kernels.masks.Mask``, typically a band).
        block_sizes: tiles to align to.
        tolerance: maximum relative difference between rounded and exact kept-pair counts; None
            accepts whatever the tiles allow (small sequences with big tiles cannot always meet 1%).

    Returns:
        The TileMask; its ``density`` is the rounded density, ``target_density`` the exact one.

    Raises:
        ValueError: the built mask's kept pairs differ from the exact mask's by more than
            ``tolerance``.
        RuntimeError: the built mask does not keep the planned number of pairs (a bug here).
    """
    counts = mask.tile_counts(block_sizes)
    areas = tile_areas(mask.tokens, block_sizes)
    target = int(counts.sum())
    full = counts == areas
    partial = (counts > 0) & ~full
    rows, cols = np.nonzero(partial)
    fill = counts[rows, cols] / areas[rows, cols]
    order = np.argsort(-fill, kind="stable")
    running = int(areas[full].sum()) + np.concatenate([[0], np.cumsum(areas[rows, cols][order])])
    keep = int(np.argmin(np.abs(running - target)))
    blocks = full.copy()
    blocks[rows[order[:keep]], cols[order[:keep]]] = True
    blocks.setflags(write=False)
    rounded = TileMask(mask.tokens, block_sizes, blocks, float(mask.density))
    # Both checks read the mask actually built, not the plan (``running[keep]``): a wrong selection
    # above (say one tile short) would otherwise leave the planned count optimal and within
    # tolerance while the returned mask is not. Counting per tile keeps this O(tiles), not O(N^2).
    built = rounded.kept_pairs
    planned = int(running[keep])
    if built != planned:
        raise RuntimeError(
            f"rounding to {block_sizes} built a mask of {built} pairs, expected {planned} (the "
            f"closest whole-tile count to the exact mask's {target} pairs, keeping the first {keep} "
            f"of {rows.size} partial tiles in fill order); the tile selection is broken"
        )
    error = abs(built - target) / target
    if tolerance is not None and error > tolerance:
        raise ValueError(
            f"rounding to {block_sizes} changes the kept pairs by {error:.2%} (> "
            f"tolerance={tolerance:.2%}): built {built} pairs for the exact mask's {target}; use "
            "smaller tiles or tolerance=None"
        )
    return rounded
