"""Tile statistics of the SVG mask for one geometry and tile size (no timing)."""

from __future__ import annotations

from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan


def tile_stats(geometry: TokenGeometry, density: float, block_sizes: BlockSizes) -> dict:
    """Visited / masked tile fractions for B1-B3 and the B3 rounded density.

    Args:
        geometry: token geometry.
        density: target kept fraction in (0, 1].
        block_sizes: tile sizes.

    Returns:
        JSON-ready dict with tokens, density (exact, sink counted), tiles_visited_fraction,
        executed_pairs_fraction (B1/B2: visited tiles x tile area over N^2, padding included),
        b2_masked_fraction, b3_masked_fraction, b3_executed_pairs_fraction, b3_density and more.
    """
    mask = band_for_density(geometry, density)
    b2 = build_plan(mask, block_sizes, "b2")
    b3 = build_plan(mask, block_sizes, "b3", None)
    return {
        "frames": geometry.frames,
        "height": geometry.height,
        "width": geometry.width,
        "tokens": geometry.tokens,
        "tokens_per_frame": geometry.tokens_per_frame,
        "block_q": block_sizes.block_q,
        "block_kv": block_sizes.block_kv,
        "num_q_tiles": b2.num_q_tiles,
        "num_kv_tiles": b2.num_kv_tiles,
        "target_density": density,
        "half_width": mask.half_width,
        "density": mask.density,
        "tiles_visited_fraction": b2.tiles_visited_fraction,
        "executed_pairs_fraction": b2.executed_pairs_fraction,
        "b1_masked_fraction": 1.0,
        "b2_masked_fraction": b2.masked_fraction,
        "b3_tiles_visited_fraction": b3.tiles_visited_fraction,
        "b3_executed_pairs_fraction": b3.executed_pairs_fraction,
        "b3_masked_fraction": b3.masked_fraction,
        "b3_density": b3.density,
    }
