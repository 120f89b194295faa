"""Tile classification, visit lists, B3 rounding and the seed's 720p tile statistics."""

import numpy as np
import pytest

from kernels.masks.band import BandMask, PaddingMask, band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.masks.tile_grid import padding_tiles, tile_areas
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes, largest_tile_within
from kernels.plans.rounding import round_to_tiles
from kernels.plans.tiles import build_plan
from tests.helpers.geometry import preset_tokens
from tests.helpers.masks import brute_tile_counts


def test_classification_hand_written():
    # N=6, tiles of 2, |q-k| <= 2: full on the diagonal, partial beside it, empty in the corners.
    plan = build_plan(BandMask(6, 2, 0), BlockSizes(2, 2), "b2")
    np.testing.assert_array_equal(plan.full_count, [1, 1, 1])
    np.testing.assert_array_equal(plan.full_kv, [[0], [1], [2]])
    np.testing.assert_array_equal(plan.partial_count, [1, 2, 1])
    np.testing.assert_array_equal(plan.partial_kv, [[1, 1], [0, 2], [1, 1]])  # padded by repeat
    assert plan.tiles_visited_fraction == pytest.approx(7 / 9)
    assert plan.masked_fraction == pytest.approx(4 / 7)
    b1 = build_plan(BandMask(6, 2, 0), BlockSizes(2, 2), "b1")
    np.testing.assert_array_equal(b1.full_count, [0, 0, 0])
    np.testing.assert_array_equal(b1.partial_count, [2, 3, 2])
    assert b1.masked_fraction == 1.0


def test_padding_tiles_are_partial():
    # N=5 with tiles of 2: the third row and column hold padding; dense b0 masks only those.
    plan = build_plan(PaddingMask(5), BlockSizes(2, 2), "b0")
    np.testing.assert_array_equal(plan.full_count, [2, 2, 0])
    np.testing.assert_array_equal(plan.partial_count, [1, 1, 3])
    np.testing.assert_array_equal(padding_tiles(5, BlockSizes(2, 2))[2], [True] * 3)
    np.testing.assert_array_equal(tile_areas(5, BlockSizes(2, 2))[2], [2, 2, 1])


@pytest.mark.parametrize("layout", ["band", "strided"])
@pytest.mark.parametrize("bs", [BlockSizes(8, 8), BlockSizes(16, 24), BlockSizes(40, 8)])
def test_tile_counts_match_brute_force(layout, bs):
    geometry = TokenGeometry(4, 3, 3)  # 36 tokens: every block size leaves padding somewhere
    make = band_for_density if layout == "band" else strided_temporal_mask
    mask = make(geometry, 0.35)
    np.testing.assert_array_equal(mask.tile_counts(bs), brute_tile_counts(mask, bs))


def test_rounded_mask_is_whole_tiles_within_tolerance():
    geometry = TokenGeometry(8, 8, 8)  # 512 tokens
    mask = band_for_density(geometry, 0.3)
    bs = BlockSizes(16, 16)
    rounded = round_to_tiles(mask, bs)
    assert abs(rounded.kept_pairs - mask.kept_pairs) <= 0.01 * mask.kept_pairs
    counts = rounded.tile_counts(bs)
    areas = tile_areas(mask.tokens, bs)
    assert np.all((counts == 0) | (counts == areas))
    np.testing.assert_array_equal(brute_tile_counts(rounded, bs), counts)
    # Every tile the exact mask keeps fully stays; every empty tile stays empty.
    exact = mask.tile_counts(bs)
    assert np.all(rounded.blocks[exact == areas])
    assert not np.any(rounded.blocks[exact == 0])
    plan = build_plan(mask, bs, "b3")
    assert plan.masked_fraction == 0.0  # 512 is a multiple of 16: no padding tiles
    assert plan.density == pytest.approx(rounded.density)


def test_rounding_tolerance_error():
    mask = band_for_density(TokenGeometry(3, 8, 8), 0.39)
    with pytest.raises(ValueError, match="tolerance"):
        round_to_tiles(mask, BlockSizes(64, 64))
    assert round_to_tiles(mask, BlockSizes(64, 64), None).density > 0


@pytest.mark.parametrize(
    ("density", "tile", "sign"),
    # 192 tokens: 48 x 48 tiles keep 7.2% fewer pairs than the exact band; 64 x 64 tiles keep
    # 13.6% more at density 0.39.
    [(0.1, 48, -1), (0.39, 64, 1)],
    ids=["fewer pairs", "more pairs"],
)
def test_rounding_beyond_the_tolerance_is_refused_whichever_way_it_errs(density, tile, sign):
    mask = band_for_density(TokenGeometry(3, 8, 8), density)
    tiles = BlockSizes(tile, tile)
    loose = round_to_tiles(mask, tiles, None)
    error = (loose.kept_pairs - mask.kept_pairs) / mask.kept_pairs
    assert np.sign(error) == sign and abs(error) > 0.05  # the case errs the way it says
    with pytest.raises(ValueError, match=f"changes the kept pairs by {abs(error):.2%}"):
        round_to_tiles(mask, tiles, 0.05)
    # Just inside the tolerance the same rounding is accepted, just outside it is not.
    assert round_to_tiles(mask, tiles, abs(error) * 1.001).kept_pairs == loose.kept_pairs
    with pytest.raises(ValueError, match="tolerance"):
        round_to_tiles(mask, tiles, abs(error) * 0.999)


@pytest.fixture(scope="module")
def seed_mask():
    return band_for_density(preset_tokens("720p"), 0.3887)


def test_seed_tile_statistics_720p(seed_mask):
    b2 = build_plan(seed_mask, BlockSizes(3328, 1536), "b2")
    assert b2.tiles_visited_fraction == pytest.approx(0.44, abs=0.015)
    assert b2.masked_fraction == pytest.approx(0.2755, abs=0.02)
    b2_small = build_plan(seed_mask, BlockSizes(1024, 1536), "b2")
    assert b2_small.masked_fraction == pytest.approx(0.1695, abs=0.02)
    b3 = build_plan(seed_mask, BlockSizes(3328, 1536), "b3")
    assert b3.density == pytest.approx(0.3887, abs=0.01)
    assert b3.masked_fraction <= 0.04


def test_block_size_validation():
    with pytest.raises(ValueError, match="positive int"):
        BlockSizes(0, 8)
    with pytest.raises(ValueError, match="multiple of 8"):
        BlockSizes(12, 8).validate(64)
    with pytest.raises(ValueError, match="multiple of 128"):
        BlockSizes(64, 128).validate(1024, "pallas_tpu")
    with pytest.raises(ValueError, match="at most 72"):
        BlockSizes(80, 8).validate(70)
    with pytest.raises(ValueError, match="variant"):
        build_plan(BandMask(8, 1, 0), BlockSizes(8, 8), "b4")
    assert auto_block_sizes(37, "xla") == BlockSizes(40, 40)
    assert auto_block_sizes(100_000, "xla") == BlockSizes(128, 128)


# Each backend's tile sides: multiples of its granularity (the XLA granularity for the
# reference), powers of two on the Triton backend.
TILE_SIDES = {
    "xla": lambda side: side % 8 == 0,
    "reference": lambda side: side % 8 == 0,
    "pallas_tpu": lambda side: side % 128 == 0,
    "pallas_gpu": lambda side: side >= 16 and side & (side - 1) == 0,
}


@pytest.mark.parametrize("backend", TILE_SIDES)
def test_largest_tile_within_is_the_widest_tile_side_not_past_the_width(backend):
    """Against every tile side counted up to the width: the widest one at most ``width``
    (never rounded up past it), or the smallest side when none fits."""
    is_side = TILE_SIDES[backend]
    smallest = min(side for side in range(1, 129) if is_side(side))
    for width in range(1, 1_100):
        fitting = [side for side in range(1, width + 1) if is_side(side)]
        assert largest_tile_within(width, backend) == max(fitting, default=smallest), width


def test_largest_tile_within_by_hand():
    assert largest_tile_within(255, "pallas_tpu") == 128  # one token short of two MXU tiles
    assert largest_tile_within(256, "pallas_tpu") == 256
    assert largest_tile_within(100, "pallas_tpu") == 128  # narrower than any tile: the smallest
    assert largest_tile_within(100, "pallas_gpu") == 64
    assert largest_tile_within(17, "xla") == largest_tile_within(17, "reference") == 16
    assert largest_tile_within(2 * 1_000 + 1, "pallas_tpu") == 1_920


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_executed_pairs_count_whole_visited_tiles_not_the_mask(variant):
    """Executed pairs: every visited tile's full area (masked-out pairs and padding included),
    counted here tile by tile from the visit lists; never below the plan's density."""
    tokens, tiles = 300, BlockSizes(64, 32)
    mask = PaddingMask(tokens) if variant == "b0" else BandMask(tokens, 50, 20)
    plan = build_plan(mask, tiles, variant, rounding_tolerance=None)
    visited = {
        (i, int(j))
        for i in range(plan.num_q_tiles)
        for kv, count in ((plan.full_kv, plan.full_count), (plan.partial_kv, plan.partial_count))
        for j in kv[i, : count[i]]
    }
    expected = len(visited) * 64 * 32 / tokens**2
    assert plan.executed_pairs_fraction == pytest.approx(expected, rel=1e-12)
    assert plan.executed_pairs_fraction >= plan.density
    assert plan.stats()["executed_pairs_fraction"] == plan.executed_pairs_fraction
