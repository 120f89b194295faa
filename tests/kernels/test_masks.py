"""SVG band masks: hand-written cases, exact density, jnp/NumPy predicate agreement."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.masks.band import (
    BandMask,
    PaddingMask,
    StridedTemporalMask,
    band_for_density,
    band_kept_pairs,
    strided_temporal_mask,
)
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import inverse_temporal_permutation, temporal_permutation
from tests.helpers.geometry import preset_tokens


def test_band_mask_hand_written():
    expected = np.array(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 0, 1, 1, 1],
            [1, 0, 0, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(BandMask(5, 1, 1).dense(), expected)
    assert BandMask(5, 1, 1).kept_pairs == expected.sum()


@pytest.mark.parametrize(("tokens", "w", "sink"), [(7, 0, 0), (12, 3, 4), (12, 11, 12), (30, 5, 9)])
def test_kept_pairs_is_exact(tokens, w, sink):
    mask = BandMask(tokens, w, sink)
    assert band_kept_pairs(tokens, w, sink) == mask.dense().sum()
    assert mask.density == pytest.approx(mask.dense().mean())


def test_predicate_same_in_numpy_and_jnp_and_padding_excluded():
    mask = BandMask(20, 3, 5)
    q = np.arange(24)[:, None]
    k = np.arange(24)[None, :]
    host = mask.allowed(q, k)
    device = np.asarray(mask.allowed(jnp.asarray(q), jnp.asarray(k)))
    np.testing.assert_array_equal(host, device)
    assert not host[:, 20:].any()  # padded keys are never allowed
    assert PaddingMask(20).allowed(q, k).shape == (24, 24)
    assert not PaddingMask(20).allowed(q, k)[:, 20:].any()


def test_strided_temporal_is_permuted_band():
    geometry = TokenGeometry(4, 2, 3)
    band = band_for_density(geometry, 0.4)
    strided = strided_temporal_mask(geometry, 0.4)
    inv = inverse_temporal_permutation(geometry)
    # Pair (q, k) in frame-major order is pair (t(q), t(k)) of the band in the temporal layout.
    np.testing.assert_array_equal(strided.dense(), band.dense()[np.ix_(inv, inv)])
    perm = temporal_permutation(geometry)
    np.testing.assert_array_equal(strided.dense()[np.ix_(perm, perm)], band.dense())
    assert strided.kept_pairs == strided.dense().sum()
    q = jnp.arange(geometry.tokens)[:, None]
    np.testing.assert_array_equal(np.asarray(strided.allowed(q, q.T)), strided.dense())


@pytest.mark.parametrize("density", [0.05, 0.2, 0.3887, 0.7, 1.0])
def test_band_for_density_is_closest(density):
    geometry = TokenGeometry(5, 3, 4)
    mask = band_for_density(geometry, density)
    assert mask.sink == geometry.tokens_per_frame
    target = density * geometry.tokens**2
    error = abs(mask.kept_pairs - target)
    for w in (mask.half_width - 1, mask.half_width + 1):
        if 0 <= w < geometry.tokens:
            assert error <= abs(band_kept_pairs(geometry.tokens, w, mask.sink) - target)


def test_band_for_density_720p():
    mask = band_for_density(preset_tokens("720p"), 0.3887)
    assert mask.density == pytest.approx(0.3887, abs=1e-4)


@pytest.mark.parametrize("density", [0.0, -0.1, 1.5, float("nan")])
def test_density_out_of_range(density):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        band_for_density(TokenGeometry(2, 2, 2), density)


def test_mask_fields_validated():
    with pytest.raises(ValueError, match="sink"):
        BandMask(10, 2, 11)
    with pytest.raises(ValueError, match="half_width"):
        StridedTemporalMask(TokenGeometry(2, 2, 2), -1)
