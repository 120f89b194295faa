"""STA and Radial masks against independent predicates over token coordinates.

The predicates here are written from the reference implementations' definitions (FastVideo's
``sta_mask_3d``; radial-attention's ``get_window_width`` and ``get_diagonal_split_mask`` for Wan),
per token (frame, row, column), with no code from ``kernels.masks``: STA's tile order is built by
walking the tiles, Radial's rule with plain Python ints.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels.masks.geometry import TokenGeometry
from kernels.masks.radial import RadialMask
from kernels.masks.sta import STA_WAN_TILE, StaMask, TileOrder, from_tile_order, to_tile_order
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.plans.rounding import round_to_tiles
from tests.helpers.geometry import preset_tokens
from tests.helpers.masks import brute_tile_counts

PRESETS = ("cpu", "480p", "720p", "1080p", "1440p")
ROUNDING_TOLERANCE = 0.01  # build_plan's default for b3


def walk_tile_order(geometry: TokenGeometry, tile) -> np.ndarray:
    """Frame-major index of each tile-order position, by walking tiles and their tokens."""
    f, h, w = geometry.frames, geometry.height, geometry.width
    order = []
    for t0 in range(0, f, tile[0]):
        for h0 in range(0, h, tile[1]):
            for w0 in range(0, w, tile[2]):
                for t in range(t0, min(t0 + tile[0], f)):
                    for r in range(h0, min(h0 + tile[1], h)):
                        for c in range(w0, min(w0 + tile[2], w)):
                            order.append((t * h + r) * w + c)
    return np.array(order)


def sta_predicate(geometry, tile, window, q_fm, k_fm) -> np.ndarray:
    """FastVideo's rule on frame-major token indices: per axis, the key's tile within k // 2
    tiles of the query's tile, the window centre clamped to k // 2 tiles from the grid's edge."""
    dims = (geometry.frames, geometry.height, geometry.width)
    keep = np.ones(np.broadcast(q_fm, k_fm).shape, dtype=bool)
    strides = (geometry.height * geometry.width, geometry.width, 1)
    for axis in range(3):
        n_tiles = -(-dims[axis] // tile[axis])
        half = window[axis] // 2
        q_tile = (q_fm // strides[axis]) % dims[axis] // tile[axis]
        k_tile = (k_fm // strides[axis]) % dims[axis] // tile[axis]
        centre = np.minimum(np.maximum(q_tile, half), n_tiles - 1 - half)  # torch.clamp's order
        keep &= np.abs(centre - k_tile) <= half
    return keep


def sta_kept_pairs(geometry, tile, window) -> int:
    """Kept pairs of FastVideo's rule: it holds axis by axis, so the product over the axes of the
    coordinate pairs (query, key) it keeps on each, counted pair by pair."""
    total = 1
    for size, t, k in zip(
        (geometry.frames, geometry.height, geometry.width), tile, window, strict=True
    ):
        n_tiles, half = -(-size // t), k // 2
        kept = 0
        for a in range(size):
            centre = min(max(a // t, half), n_tiles - 1 - half)
            kept += sum(abs(centre - b // t) <= half for b in range(size))
        total *= kept
    return total


def radial_rule(i: int, j: int, per_frame: int, decay: float) -> tuple[bool, float]:
    """radial-attention's Wan rule for query frame i, key frame j: (kept, window width)."""
    if j == 0:
        return True, float(per_frame)
    dist = abs(i - j)
    group = dist.bit_length()
    split_length = 2 ** per_frame.bit_length() / 2**group
    kept = split_length >= 128 or dist % int(128 / split_length) == 0
    if dist <= 1:
        return kept, float(per_frame)
    decay_length = 2 ** per_frame.bit_length() / 2**group * decay
    return kept, decay_length if decay_length >= 128 else 128.0


def radial_rows(geometry: TokenGeometry, decay: float, rows: np.ndarray) -> np.ndarray:
    """bool [len(rows), N]: the reference's mask on the given frame-major query rows."""
    s = geometry.tokens_per_frame
    out = np.zeros((rows.size, geometry.tokens), dtype=bool)
    c = np.arange(s)
    for n, q in enumerate(rows):
        i, r = divmod(int(q), s)
        for j in range(geometry.frames):
            kept, width = radial_rule(i, j, s, decay)
            out[n, j * s : (j + 1) * s] = kept & (np.abs(c - r) <= width)
    return out


def radial_kept_pairs(geometry: TokenGeometry, decay: float) -> int:
    """Kept pairs by the reference's rule, summed per frame pair over query positions."""
    s, total = geometry.tokens_per_frame, 0
    r = np.arange(s)
    for i in range(geometry.frames):
        for j in range(geometry.frames):
            kept, width = radial_rule(i, j, s, decay)
            if kept:
                w = int(np.floor(width))
                total += int(np.sum(np.minimum(s - 1, r + w) - np.maximum(0, r - w) + 1))
    return total


def sample_rows(tokens: int, count: int = 24) -> np.ndarray:
    rng = np.random.default_rng(tokens)
    return np.unique(np.concatenate([[0, tokens - 1], rng.integers(0, tokens, count)]))


def sta_at(name: str, window=(3, 3, 3)) -> StaMask:
    return StaMask(TileOrder(preset_tokens(name), STA_WAN_TILE), window)


SMALL = [TokenGeometry(5, 6, 8), TokenGeometry(4, 3, 7), TokenGeometry(9, 12, 20)]


@pytest.mark.parametrize("geometry", SMALL, ids=str)
@pytest.mark.parametrize("tile", [(2, 2, 3), (1, 4, 4), (6, 8, 8), (3, 1, 2)])
@pytest.mark.parametrize("window", [(1, 1, 1), (3, 3, 1), (2, 3, 5), (3, 6, 10)])
def test_sta_equals_fastvideo_rule_on_small_grids(geometry, tile, window):
    """Every pair, in the tile order walked tile by tile (uneven edge tiles included)."""
    mask = StaMask(TileOrder(geometry, tile), window)
    order = walk_tile_order(geometry, tile)
    expected = sta_predicate(geometry, tile, window, order[:, None], order[None, :])
    np.testing.assert_array_equal(mask.dense(), expected)
    assert mask.kept_pairs == int(expected.sum())


@pytest.mark.parametrize("name", PRESETS)
def test_sta_equals_fastvideo_rule_at_presets(name):
    """Sampled query rows against every key, and the exact kept-pair count, at each preset."""
    for window in [(3, 3, 3), (1, 5, 7), (3, 1, 10)]:  # FastVideo's Wan windows
        mask = sta_at(name, window)
        g = mask.order.geometry
        order = mask.order.permutation
        rows = sample_rows(g.tokens)
        expected = sta_predicate(g, STA_WAN_TILE, window, order[rows][:, None], order[None, :])
        np.testing.assert_array_equal(mask.allowed(rows[:, None], np.arange(g.tokens)), expected)
        assert mask.kept_pairs == sta_kept_pairs(g, STA_WAN_TILE, window)


@pytest.mark.parametrize("name", PRESETS)
def test_tile_order_is_the_walked_order(name):
    g = preset_tokens(name)
    np.testing.assert_array_equal(
        TileOrder(g, STA_WAN_TILE).permutation, walk_tile_order(g, STA_WAN_TILE)
    )


def test_tile_order_round_trips_exactly_both_ways():
    import jax
    import jax.numpy as jnp

    order = TileOrder(TokenGeometry(5, 6, 8), (2, 4, 3))
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 240, 3, 4))
    there = to_tile_order(x, order)
    np.testing.assert_array_equal(
        np.asarray(there), np.asarray(x)[:, walk_tile_order(order.geometry, order.tile)]
    )
    assert jnp.array_equal(from_tile_order(there, order), x)
    assert jnp.array_equal(to_tile_order(from_tile_order(x, order), order), x)
    assert not jnp.array_equal(there, x)


@pytest.mark.parametrize(
    "geometry",
    [
        TokenGeometry(9, 12, 20),
        TokenGeometry(6, 5, 9),
        TokenGeometry(17, 4, 4),
        TokenGeometry(12, 8, 16),
    ],
    ids=str,
)
@pytest.mark.parametrize("decay", [0.2, 1.0, 5.0])
def test_radial_equals_reference_rule_on_small_grids(geometry, decay):
    """Every pair; the grids reach S < 64, S < 128 and S = 256 (its frame-skipping bands)."""
    mask = RadialMask(geometry, decay)
    expected = radial_rows(geometry, decay, np.arange(geometry.tokens))
    np.testing.assert_array_equal(mask.dense(), expected)
    assert mask.kept_pairs == int(expected.sum()) == radial_kept_pairs(geometry, decay)


@pytest.mark.parametrize("name", PRESETS)
def test_radial_equals_reference_rule_at_presets(name):
    g = preset_tokens(name)
    for decay in (0.2, 1.0):  # its Wan script's factor, and its default
        mask = RadialMask(g, decay)
        rows = sample_rows(g.tokens)
        expected = radial_rows(g, decay, rows)
        np.testing.assert_array_equal(mask.allowed(rows[:, None], np.arange(g.tokens)), expected)
        assert mask.kept_pairs == radial_kept_pairs(g, decay)


@pytest.mark.parametrize(
    "tiles", [BlockSizes(128, 128), BlockSizes(64, 96), BlockSizes(7, 5)], ids=str
)
def test_tile_counts_equal_brute_force(tiles):
    g = preset_tokens("cpu")
    for mask in (
        sta_at("cpu", (1, 1, 3)),
        StaMask(TileOrder(g, (2, 3, 4)), (3, 1, 3)),
        RadialMask(g, 0.2),
    ):
        np.testing.assert_array_equal(mask.tile_counts(tiles), brute_tile_counts(mask, tiles))


def _masks_at(name):
    g = preset_tokens(name)
    return [
        sta_at(name, (3, 3, 3)),
        sta_at(name, (1, 5, 7)),
        RadialMask(g, 0.2),
        RadialMask(g, 1.0),
    ]


def _check_rounding(mask, tiles):
    """Rounding keeps the exact count within the tolerance, above or below it."""
    rounded = round_to_tiles(mask, tiles, None)
    error = (rounded.kept_pairs - mask.kept_pairs) / mask.kept_pairs
    assert abs(error) <= ROUNDING_TOLERANCE, (mask, tiles, error)
    round_to_tiles(mask, tiles, ROUNDING_TOLERANCE)  # and the plan accepts it at that tolerance
    return error


@pytest.mark.parametrize("name", ["cpu", "480p", "720p"])
def test_rounding_within_tolerance_on_xla_tiles(name):
    for mask in _masks_at(name):
        _check_rounding(mask, auto_block_sizes(mask.tokens, "xla"))


@pytest.mark.slow  # 1080p and 1440p on 128-token tiles classify about 2 and 6 million tiles each
@pytest.mark.parametrize("name", ["1080p", "1440p"])
def test_rounding_within_tolerance_on_xla_tiles_large(name):
    for mask in _masks_at(name):
        _check_rounding(mask, auto_block_sizes(mask.tokens, "xla"))


def test_rounding_within_tolerance_on_tpu_tiles_both_signs():
    """The TPU's tiles at the presets it runs (the CPU preset fits in one of its tiles); the
    errors include both signs, so the bound is checked from above and below."""
    errors = [
        _check_rounding(mask, auto_block_sizes(mask.tokens, "pallas_tpu"))
        for name in PRESETS[1:]
        for mask in _masks_at(name)
    ]
    assert min(errors) < 0 < max(errors)
