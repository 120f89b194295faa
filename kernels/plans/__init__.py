"""Plans: block sizes, tile plans (which tiles to visit, masked or not) and B3 tile rounding."""

from kernels.plans.block_sizes import (
    BACKEND_MULTIPLE,
    BlockSizes,
)
from kernels.plans.rounding import TileMask, round_to_tiles
from kernels.plans.tiles import VARIANTS, TilePlan, build_plan

__all__ = [
    "BACKEND_MULTIPLE",
    "VARIANTS",
    "BlockSizes",
    "TileMask",
    "TilePlan",
    "build_plan",
    "round_to_tiles",
]
