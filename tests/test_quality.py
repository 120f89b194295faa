"""Video encoding and quality metrics: FFmpeg and scikit-image must agree where they can."""

import math

import numpy as np
import pytest

from evalharness.quality import ffmpeg_psnr, frame_quality
from evalharness.video import VideoError, decode_mp4, encode_mp4, side_by_side


@pytest.fixture
def videos():
    rng = np.random.default_rng(0)
    a = (rng.random((5, 48, 64, 3)) * 255).astype(np.uint8)
    noise = rng.integers(-12, 13, a.shape)
    b = np.clip(a.astype(int) + noise, 0, 255).astype(np.uint8)
    return a, b


def test_lossless_encode_round_trips(videos, tmp_path):
    a, _ = videos
    path = encode_mp4(a, tmp_path / "a.mp4", lossless=True)
    np.testing.assert_array_equal(decode_mp4(path), a)


def test_ffmpeg_psnr_agrees_with_scikit_image_on_lossless_encode(videos, tmp_path):
    a, b = videos
    pa = encode_mp4(a, tmp_path / "a.mp4", lossless=True)
    pb = encode_mp4(b, tmp_path / "b.mp4", lossless=True)
    ff = ffmpeg_psnr(pa, pb)
    sk = frame_quality(a, b)
    # FFmpeg's average comes from the mean MSE over frames: the whole-video PSNR.
    assert ff.average_db == pytest.approx(sk.video_psnr_db, abs=0.01)
    np.testing.assert_allclose(ff.per_frame_db, sk.psnr_db, atol=0.01)
    assert 20 < sk.mean_psnr_db < 40
    assert 0 < sk.mean_ssim < 1


def test_identical_videos_have_infinite_psnr(videos, tmp_path):
    a, _ = videos
    pa = encode_mp4(a, tmp_path / "a.mp4")
    assert math.isinf(ffmpeg_psnr(pa, pa).average_db)
    q = frame_quality(a, a)
    assert math.isinf(q.video_psnr_db) and q.mean_ssim == 1.0


def test_lossy_encode_is_close_but_not_exact(videos, tmp_path):
    a, _ = videos
    smooth = np.repeat(np.linspace(0, 255, 64, dtype=np.uint8)[None, None, :, None], 48, 1)
    smooth = np.broadcast_to(smooth, (5, 48, 64, 3)).copy()
    path = encode_mp4(smooth, tmp_path / "s.mp4", crf=18)
    decoded = decode_mp4(path)
    assert decoded.shape == smooth.shape
    assert frame_quality(smooth, decoded).mean_psnr_db > 35


def test_bad_frames_are_rejected_with_the_problem_named(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        encode_mp4(np.zeros((2, 16, 16, 3), np.float32), tmp_path / "x.mp4")
    with pytest.raises(ValueError, match=r"\[T, H, W, 3\]"):
        encode_mp4(np.zeros((16, 16, 3), np.uint8), tmp_path / "x.mp4")
    with pytest.raises(ValueError, match="even"):
        encode_mp4(np.zeros((2, 15, 16, 3), np.uint8), tmp_path / "x.mp4")


def test_mismatched_videos_fail_clearly(videos, tmp_path):
    a, _ = videos
    small = a[:, :32, :32]
    pa = encode_mp4(a, tmp_path / "a.mp4")
    ps = encode_mp4(small, tmp_path / "s.mp4")
    with pytest.raises(VideoError):
        ffmpeg_psnr(pa, ps)
    with pytest.raises(ValueError, match="differ in shape"):
        frame_quality(a, small)
    with pytest.raises(FileNotFoundError):
        ffmpeg_psnr(tmp_path / "missing.mp4", pa)


def test_side_by_side_has_three_panels(videos):
    a, b = videos
    out = side_by_side(a, b)
    assert out.shape == (5, 48, 192, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, :, :64], a)
    assert out[:, :, 128:].max() > 0
