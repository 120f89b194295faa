"""Our masks against Sparse VideoGen's, written here from SVG's own formulas (not from our code).

SVG (svg/models/wan/{attention,utils}.py, the Wan 2.1 path), with N = F * S self-attention tokens:
- a spatial head keeps |q - k| <= w or k < S in frame-major order (k < S: frame 0, "first frame sink");
- a temporal head permutes every frame, frame 0 included, to t = p * F + f (p = spatial position,
  f = frame) and keeps |t(q) - t(k)| <= w or t(k) < S there (its sink is the first S positions of
  that order);
- its ``sparsity`` s gives w = N (1 - sqrt(1 - s)) rounded up to a multiple of 128.
"""

import math

import numpy as np
import pytest

from kernels.masks.band import (
    StridedTemporalMask,
    band_for_density,
    band_for_svg_sparsity,
    svg_half_width,
)
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import inverse_temporal_permutation, temporal_permutation
from kernels.policy.schedule import SparsitySchedule

CPU = TokenGeometry(9, 12, 20)  # the CPU preset's latent tokens
HD720 = TokenGeometry(21, 45, 80)


def svg_temporal_order(index: np.ndarray, geometry: TokenGeometry) -> np.ndarray:
    """SVG's temporal position of frame-major token indices: p * F + f."""
    s, f = geometry.tokens_per_frame, geometry.frames
    frame, position = index // s, index % s
    return position * f + frame


def svg_allowed(q: np.ndarray, k: np.ndarray, geometry: TokenGeometry, w: int, kind: str):
    """SVG's band-plus-sink predicate on frame-major indices, for one head kind."""
    s = geometry.tokens_per_frame
    if kind == "temporal":
        q, k = svg_temporal_order(q, geometry), svg_temporal_order(k, geometry)
    return (np.abs(q - k) <= w) | (k < s)


def svg_width(tokens: int, sparsity: float) -> int:
    return math.ceil(tokens * (1 - math.sqrt(1 - sparsity)) / 128) * 128


def ours_in_frame_major(geometry: TokenGeometry, density: float, kind: str) -> np.ndarray:
    """The mask our policy applies to a head of ``kind``, seen in frame-major indices."""
    band = band_for_density(geometry, density)
    idx = np.arange(geometry.tokens)
    if kind == "spatial":
        return band.allowed(idx[:, None], idx[None, :])
    where = inverse_temporal_permutation(geometry).astype(np.int64)  # layout position of a token
    return band.allowed(where[:, None], where[None, :])


@pytest.mark.parametrize("kind", ["spatial", "temporal"])
@pytest.mark.parametrize("density", [0.25, 0.35, 0.5])
def test_masks_equal_svgs_at_matched_density(kind, density):
    w = band_for_density(CPU, density).half_width  # matched: SVG run at our band's width
    idx = np.arange(CPU.tokens)
    expected = svg_allowed(idx[:, None], idx[None, :], CPU, w, kind)
    np.testing.assert_array_equal(ours_in_frame_major(CPU, density, kind), expected)


def test_strided_temporal_mask_is_svgs_temporal_mask():
    w = band_for_density(CPU, 0.35).half_width
    idx = np.arange(CPU.tokens)
    expected = svg_allowed(idx[:, None], idx[None, :], CPU, w, "temporal")
    np.testing.assert_array_equal(StridedTemporalMask(CPU, w).dense(), expected)


def test_temporal_rows_keep_their_position_in_every_frame_cpu():
    # Every query row of a temporal head, frame 0's included, sees its own spatial position in
    # every frame (the band is wider than F - 1 at every schedule's density).
    mask = ours_in_frame_major(CPU, 0.25, "temporal")
    s, f = CPU.tokens_per_frame, CPU.frames
    same_position = (np.arange(CPU.tokens)[:, None] % s) == (np.arange(CPU.tokens)[None, :] % s)
    assert (mask | ~same_position).all()
    assert same_position.sum(axis=1).min() == f


def test_temporal_rows_keep_their_position_in_every_frame_720p():
    rng = np.random.default_rng(0)
    s, f = HD720.tokens_per_frame, HD720.frames
    rows = np.concatenate([rng.integers(0, s, 500), rng.integers(0, HD720.tokens, 1500)])
    band = band_for_svg_sparsity(HD720, 0.3)
    where = inverse_temporal_permutation(HD720).astype(np.int64)
    same = (rows[:, None] % s) + s * np.arange(f)[None, :]  # [rows, F]: the row's position
    kept = band.allowed(where[rows][:, None], where[same])
    assert kept.all(), f"{(~kept.all(axis=1)).sum()} of {rows.size} rows miss a frame"
    # SVG's own predicate agrees on these rows.
    assert svg_allowed(rows[:, None], same, HD720, band.half_width, "temporal").all()


def test_layout_is_svgs_order():
    perm = temporal_permutation(CPU).astype(np.int64)  # layout position -> frame-major token
    np.testing.assert_array_equal(svg_temporal_order(perm, CPU), np.arange(CPU.tokens))


@pytest.mark.parametrize(
    ("geometry", "sparsity", "width", "kept"),
    [(HD720, 0.3, 12416, 0.340), (CPU, 0.3, 384, 0.41), (CPU, 0.25, 384, 0.41)],
)
def test_svg_sparsity_converts_to_its_band(geometry, sparsity, width, kept):
    assert svg_half_width(geometry.tokens, sparsity) == svg_width(geometry.tokens, sparsity)
    band = band_for_svg_sparsity(geometry, sparsity)
    assert band.half_width == width
    assert band.sink == geometry.tokens_per_frame
    assert round(band.density, 3 if geometry is HD720 else 2) == kept


def test_svg_band_density_counts_every_kept_pair():
    band = band_for_svg_sparsity(CPU, 0.3)
    idx = np.arange(CPU.tokens)
    brute = svg_allowed(idx[:, None], idx[None, :], CPU, svg_width(CPU.tokens, 0.3), "spatial")
    assert band.kept_pairs == int(brute.sum())


def test_schedule_in_svgs_numbers():
    schedule = SparsitySchedule("svg", 0.2, 0.03, svg_sparsity=0.3)
    assert schedule.band(HD720) == band_for_svg_sparsity(HD720, 0.3)
    assert schedule.target_density(HD720) == pytest.approx(
        band_for_svg_sparsity(HD720, 0.3).density
    )
    plain = SparsitySchedule("ours", 0.2, 0.03, density=0.35)
    assert plain.band(HD720) == band_for_density(HD720, 0.35)
    assert plain.target_density(HD720) == 0.35


@pytest.mark.parametrize("value", [0.0, 1.0, -0.1, float("nan"), float("inf"), True, "0.3"])
def test_svg_sparsity_outside_its_range_is_refused(value):
    with pytest.raises(ValueError, match="svg_sparsity"):
        SparsitySchedule("svg", 0.2, 0.03, svg_sparsity=value)
