"""SSIM on raw uint8 frames: a known value, scikit-image's own on textured frames, and a wrong
data range that the known value exposes."""

import numpy as np
import pytest
from skimage.metrics import structural_similarity

from evalharness.evidence.quality import frame_quality

# SSIM's stabilizing constant for the luminance term, K1 = 0.01 of the data range (uint8: 255).
C1 = (0.01 * 255) ** 2


def _flat(value: int) -> np.ndarray:
    return np.full((2, 16, 16, 3), value, np.uint8)


def test_flat_frames_have_the_closed_form_ssim():
    # Flat frames have no variance: SSIM is the luminance term alone, (2 a b + C1) / (a^2 + b^2
    # + C1), here C1 / (100 + C1) = 0.061 for black against grey level 10.
    known = C1 / (10**2 + C1)
    ssim = frame_quality(_flat(0), _flat(10)).ssim
    np.testing.assert_allclose(ssim, known, rtol=1e-9)
    brighter = (2 * 100 * 110 + C1) / (100**2 + 110**2 + C1)
    np.testing.assert_allclose(frame_quality(_flat(100), _flat(110)).ssim, brighter, rtol=1e-9)


@pytest.mark.parametrize("wrong", [1.0, 2 * 255.0])
def test_a_wrong_data_range_is_far_from_the_known_value(wrong):
    # What the closed-form test would see if the frames' range were given wrong.
    known = C1 / (10**2 + C1)
    wrong_value = structural_similarity(
        _flat(0)[0], _flat(10)[0], data_range=wrong, channel_axis=-1, win_size=7
    )
    assert abs(wrong_value - known) > 1e-3 * known  # a million times the test's tolerance


def test_textured_frames_match_scikit_image_per_frame():
    rng = np.random.default_rng(0)
    reference = (rng.random((3, 32, 40, 3)) * 255).astype(np.uint8)
    noise = rng.integers(-20, 21, reference.shape)
    distorted = np.clip(reference.astype(int) + noise, 0, 255).astype(np.uint8)
    expected = [
        structural_similarity(r, d, data_range=255, channel_axis=-1)
        for r, d in zip(reference, distorted, strict=True)
    ]
    quality = frame_quality(reference, distorted)
    np.testing.assert_allclose(quality.ssim, expected, rtol=1e-12)
    assert 0.5 < quality.mean_ssim < 1.0
