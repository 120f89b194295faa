"""Tile classification and per-query-tile visit lists (the TilePlan shared by every backend).

A tile is one (query tile, key/value tile) pair of BQ x BKV token pairs. It is *empty* when the mask
keeps none of its pairs (skipped), *full* when it keeps all of them and holds no padding (computed
without a mask), and *partial* otherwise (computed with the mask predicate). Tiles that touch the
padding at the end of the query or key axis are partial whenever visited, because padded keys must
get exactly zero weight and only the masked path drops them (padded query rows are discarded). Each
mask counts its kept pairs per tile itself (``Mask.tile_counts``); the tile-grid arithmetic lives in
``kernels.masks.tile_grid``.

Variants (what a plan asks the executor to do):
- "b0": dense; every tile visited; only padding tiles masked (``PaddingMask``).
- "b1": the exact mask; every non-empty tile visited and masked.
- "b2": the exact mask; full tiles mask-free, partial tiles masked.
- "b3": the tile-rounded mask (``kernels.plans.rounding``); visited tiles mask-free except padding tiles.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from kernels.masks.band import PaddingMask
from kernels.masks.protocols import Mask
from kernels.masks.tile_grid import padding_tiles, tile_areas, tile_grid
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.rounding import round_to_tiles
from kernels.registry import TILED_VARIANTS

VARIANTS = TILED_VARIANTS  # b0 (every tile) and the sparse b1-b3, from the registry


def _reference_visit_lists(selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``_visit_lists`` (one Python iteration per row); kept for tests."""
    count = selected.sum(axis=1).astype(np.int32)
    width = max(1, int(count.max(initial=0)))
    kv = np.zeros((selected.shape[0], width), dtype=np.int32)
    for i, row in enumerate(selected):
        idx = np.flatnonzero(row)
        if idx.size:
            kv[i, : idx.size] = idx
            kv[i, idx.size :] = idx[-1]
    return kv, count


def _visit_lists(selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the column indices of ``selected`` padded with the row's last valid index.

    Args:
        selected: bool [nq, nkv].

    Returns:
        (kv int32 [nq, max(1, max_count)], count int32 [nq]). Rows with no entries repeat tile 0;
        executors ignore entries at or beyond count.
    """
    count = selected.sum(axis=1).astype(np.int32)
    width = max(1, int(count.max(initial=0)))
    rows, cols = np.nonzero(selected)  # row-major: sorted by row, then column
    first = np.concatenate([[0], np.cumsum(count, dtype=np.int64)])
    kv = np.zeros((selected.shape[0], width), dtype=np.int32)
    kv[rows, np.arange(rows.size) - first[rows]] = cols
    last = np.where(count > 0, kv[np.arange(count.size), np.maximum(count, 1) - 1], 0)
    kv = np.where(np.arange(width)[None, :] < count[:, None], kv, last[:, None]).astype(np.int32)
    return kv, count


@dataclasses.dataclass(frozen=True, eq=False)
class TilePlan:
    """Static visit lists and statistics for one (mask, block sizes, variant).

    Hashes by identity (plans are cached), so a plan can be a static argument of a jitted function.

    Attributes:
        full_kv: int32 [num_q_tiles, max_full]; kv tiles visited without a mask.
        full_count: int32 [num_q_tiles]; valid entries per row of ``full_kv``.
        partial_kv: int32 [num_q_tiles, max_partial]; kv tiles visited with ``mask``.
        partial_count: int32 [num_q_tiles].
        mask: predicate evaluated inside partial tiles (a band mask or ``PaddingMask``).
        logical_mask: the mask the plan computes exactly (the oracle's mask; for b3 the rounded one).
        tokens: sequence length N.
        block_sizes: tile sizes.
        variant: "b0" | "b1" | "b2" | "b3".
        density: exact kept fraction of ``logical_mask``.
        target_density: kept fraction of the mask the plan was built from (before rounding).
        tiles_visited_fraction: visited tiles / all tiles.
        masked_fraction: visited tiles that evaluate a mask / visited tiles.
        padded_visit_fraction: padding entries in the rectangular visit arrays / all entries.
    """

    full_kv: np.ndarray
    full_count: np.ndarray
    partial_kv: np.ndarray
    partial_count: np.ndarray
    mask: Mask
    logical_mask: Mask
    tokens: int
    block_sizes: BlockSizes
    variant: str
    density: float
    target_density: float
    tiles_visited_fraction: float
    masked_fraction: float
    padded_visit_fraction: float

    @property
    def num_q_tiles(self) -> int:
        """Query tiles, padding included."""
        return int(self.full_count.shape[0])

    @property
    def num_kv_tiles(self) -> int:
        """Key/value tiles, padding included."""
        return tile_grid(self.tokens, self.block_sizes)[1]

    @property
    def executed_pairs_fraction(self) -> float:
        """Query-key pairs the executor computes, over N^2: every visited tile's whole
        BQ x BKV area, the pairs a masked tile computes and then drops and the padding included.

        This, not ``density``, is the work a sparse arm does; it exceeds ``density`` by the
        masked-out share of partial tiles and the padding (and can exceed 1 for a dense plan).
        """
        visited = int(self.full_count.sum()) + int(self.partial_count.sum())
        area = self.block_sizes.block_q * self.block_sizes.block_kv
        return visited * area / float(self.tokens) ** 2

    def stats(self) -> dict[str, float | int | str]:
        """The plan's statistics as a flat dict (JSON-friendly)."""
        return {
            "variant": self.variant,
            "tokens": self.tokens,
            "block_q": self.block_sizes.block_q,
            "block_kv": self.block_sizes.block_kv,
            "num_q_tiles": self.num_q_tiles,
            "num_kv_tiles": self.num_kv_tiles,
            "density": self.density,
            "target_density": self.target_density,
            "tiles_visited_fraction": self.tiles_visited_fraction,
            "executed_pairs_fraction": self.executed_pairs_fraction,
            "masked_fraction": self.masked_fraction,
            "padded_visit_fraction": self.padded_visit_fraction,
        }


@functools.lru_cache(maxsize=128)
def build_plan(
    mask: Mask, block_sizes: BlockSizes, variant: str, rounding_tolerance: float | None = 0.01
) -> TilePlan:
    """Classifies tiles and builds the visit lists for ``variant``.

    Args:
        mask: the logical mask (``BandMask``, ``StridedTemporalMask`` or ``PaddingMask``); for "b0"
            only its ``tokens`` matter.
        block_sizes: tile sizes.
        variant: one of ``VARIANTS``.
        rounding_tolerance: for "b3", the allowed relative error of the rounded kept-pair count
            (None accepts any); see ``kernels.plans.rounding.round_to_tiles``.

    Returns:
        The TilePlan (cached: equal arguments return the same object).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}; use one of {VARIANTS}")
    if variant != "b0" and not isinstance(mask, Mask):  # b0 reads only mask.tokens
        raise ValueError(f"cannot classify tiles of {type(mask).__name__}; expected a kernels mask")
    n = mask.tokens
    areas = tile_areas(n, block_sizes)
    padding = padding_tiles(n, block_sizes)
    kernel_mask = mask
    target = float(mask.density)
    if variant == "b0":
        logical = kernel_mask = PaddingMask(n)
        visited = np.ones_like(padding)
        target = 1.0
        partial = padding
    elif variant == "b3":
        logical = round_to_tiles(mask, block_sizes, tolerance=rounding_tolerance)
        kernel_mask = PaddingMask(n)
        visited = logical.blocks
        partial = visited & padding
    else:
        logical = mask
        counts = mask.tile_counts(block_sizes)
        visited = counts > 0
        partial = visited if variant == "b1" else visited & ((counts < areas) | padding)
    full = visited & ~partial
    full_kv, full_count = _visit_lists(full)
    partial_kv, partial_count = _visit_lists(partial)
    n_visited = int(visited.sum())
    entries = full_kv.size + partial_kv.size
    return TilePlan(
        full_kv=full_kv,
        full_count=full_count,
        partial_kv=partial_kv,
        partial_count=partial_count,
        mask=kernel_mask,
        logical_mask=logical,
        tokens=n,
        block_sizes=block_sizes,
        variant=variant,
        density=float(logical.density),
        target_density=target,
        tiles_visited_fraction=n_visited / visited.size,
        masked_fraction=int(partial.sum()) / max(1, n_visited),
        padded_visit_fraction=(entries - n_visited) / entries,
    )
