"""Masks: token geometry, head layouts, band masks and the tile-grid arithmetic they count with."""

from kernels.masks.band import (
    BandMask,
    PaddingMask,
    StridedTemporalMask,
    band_for_density,
    band_for_svg_sparsity,
    band_kept_pairs,
    spatial_mask,
    strided_temporal_mask,
    svg_half_width,
    temporal_mask,
)
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import (
    from_head_layouts,
    inverse_temporal_permutation,
    temporal_permutation,
    temporal_position,
    to_frame_major,
    to_head_layouts,
    to_temporal_major,
)
from kernels.masks.protocols import (
    BandLike,
    BlockSizesLike,
    Mask,
    MaskLike,
    PredicateMask,
    TilePlanLike,
)
from kernels.masks.tile_grid import band_tile_counts, padding_tiles, tile_areas, tile_grid

__all__ = [
    "BandLike",
    "BandMask",
    "BlockSizesLike",
    "Mask",
    "MaskLike",
    "PaddingMask",
    "PredicateMask",
    "StridedTemporalMask",
    "TilePlanLike",
    "TokenGeometry",
    "band_for_density",
    "band_for_svg_sparsity",
    "band_kept_pairs",
    "band_tile_counts",
    "from_head_layouts",
    "inverse_temporal_permutation",
    "padding_tiles",
    "spatial_mask",
    "strided_temporal_mask",
    "svg_half_width",
    "temporal_mask",
    "temporal_permutation",
    "temporal_position",
    "tile_areas",
    "tile_grid",
    "to_frame_major",
    "to_head_layouts",
    "to_temporal_major",
]
