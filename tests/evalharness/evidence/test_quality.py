"""Video encoding and quality metrics: FFmpeg and scikit-image must agree where they can."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from evalharness.evidence.quality import (
    codec_noise,
    ffmpeg_psnr,
    frame_quality,
    gap_to_noise_floor,
    measure,
    quality_metrics,
)
from evalharness.evidence.video import (
    VideoError,
    decode_mp4,
    encode_lossless,
    encode_mp4,
    lossless_path,
    side_by_side,
    viewable_path,
)


@pytest.fixture
def videos():
    rng = np.random.default_rng(0)
    a = (rng.random((5, 48, 64, 3)) * 255).astype(np.uint8)
    noise = rng.integers(-12, 13, a.shape)
    b = np.clip(a.astype(int) + noise, 0, 255).astype(np.uint8)
    return a, b


def test_lossless_encode_round_trips(videos, tmp_path):
    a, _ = videos
    path = encode_lossless(a, tmp_path / "a.mkv")
    np.testing.assert_array_equal(decode_mp4(path), a)


def test_ffmpeg_psnr_agrees_with_scikit_image_on_lossless_encode(videos, tmp_path):
    a, b = videos
    pa = encode_lossless(a, tmp_path / "a.mkv")
    pb = encode_lossless(b, tmp_path / "b.mkv")
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
    band = out.shape[1] - 48
    assert band % 16 == 0 and band > 0  # a label band the codec's macroblocks tile
    assert out.shape == (5, band + 48, 192, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, band:, :64], a)
    assert out[:, band:, 128:].max() > 0
    # Each panel has its label: white text over each third of the band, the same every frame.
    for panel in range(3):
        assert out[0, :band, 64 * panel : 64 * (panel + 1)].max() > 128
    np.testing.assert_array_equal(out[0, :band], out[-1, :band])


# The gate measures attention, not the codec.


def _smooth(t=5, h=48, w=64, seed=1):
    """Natural-ish video: gradients that drift over time, a little noise."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 3, w)[None, None, :, None]
    y = np.linspace(0, 2, h)[None, :, None, None]
    tt = np.arange(t)[:, None, None, None] * 0.3
    base = 128 + 90 * np.sin(x + tt) * np.cos(y - tt) + np.array([0, 25, -25])
    return np.clip(base + rng.normal(0, 2, (t, h, w, 3)), 0, 255).astype(np.uint8)


def _arm(frames, latents=0.0):
    return SimpleNamespace(frames=frames, latents=np.full((2, 3), latents, np.float32))


def test_ffv1_lossless_round_trips_at_any_size(tmp_path):
    odd = _smooth(3, 15, 21)
    path = encode_lossless(odd, tmp_path / "odd.lossless.mkv")
    np.testing.assert_array_equal(decode_mp4(path), odd)
    with pytest.raises(ValueError, match=r"\.mkv"):
        encode_lossless(odd, tmp_path / "odd.mp4")


def test_lossless_and_viewable_names_pair_up(tmp_path):
    assert lossless_path(tmp_path / "dense.mp4") == tmp_path / "dense.lossless.mkv"
    assert viewable_path(tmp_path / "dense.lossless.mkv") == tmp_path / "dense.mp4"
    assert viewable_path(tmp_path / "dense.mp4") is None


def test_ffmpeg_psnr_of_lossless_videos_is_the_raw_frame_psnr(videos, tmp_path):
    a, b = videos
    pa = encode_lossless(a, tmp_path / "a.lossless.mkv")
    pb = encode_lossless(b, tmp_path / "b.lossless.mkv")
    ff, sk = ffmpeg_psnr(pa, pb), frame_quality(a, b)
    assert ff.average_db == pytest.approx(sk.video_psnr_db, abs=0.01)
    np.testing.assert_allclose(ff.per_frame_db, sk.psnr_db, atol=0.01)


def test_codec_noise_is_none_for_lossless_and_real_for_crf18(tmp_path):
    frames = _smooth()
    exact = codec_noise(encode_lossless(frames, tmp_path / "d.lossless.mkv"), frames)
    assert math.isinf(exact.psnr_db) or exact.psnr_db > 80
    lossy = codec_noise(encode_mp4(frames, tmp_path / "d.mp4", crf=18), frames)
    assert 25 < lossy.psnr_db < 60  # yuv420p chroma and CRF 18 quantisation: codec noise
    assert lossy.per_frame_db.shape == (5,)


def test_two_crf18_encodes_understate_the_raw_frame_psnr(tmp_path):
    """The issue's symptom: near-identical frames (a dense-vs-dense floor) read far lower through
    two independent CRF-18 encodes; lossless encodes read the raw-frame PSNR."""
    dense = _smooth()
    changed = np.random.default_rng(3).random(dense.shape[:3]) < 0.01  # 1% of pixels off by one
    floor = dense.copy()
    floor[changed] = np.clip(floor[changed].astype(int) + 1, 0, 255)
    raw = frame_quality(dense, floor).video_psnr_db
    lossy = ffmpeg_psnr(
        encode_mp4(dense, tmp_path / "d.mp4"), encode_mp4(floor, tmp_path / "f.mp4")
    )
    lossless = ffmpeg_psnr(
        encode_lossless(dense, tmp_path / "d.lossless.mkv"),
        encode_lossless(floor, tmp_path / "f.lossless.mkv"),
    )
    assert lossless.average_db == pytest.approx(raw, abs=0.01)
    assert raw > 60 and lossy.average_db < raw - 10  # about 68 dB raw, 51.5 dB through the codec


def test_worst_frame_and_whole_video_psnr():
    ref = _smooth()
    dis = ref.copy()
    dis[0] = ref[0]  # identical frame: inf
    dis[1:] = np.clip(ref[1:].astype(int) + 2, 0, 255)
    dis[3] = np.clip(ref[3].astype(int) + 20, 0, 255)  # one bad frame
    q = frame_quality(ref, dis)
    assert math.isinf(q.psnr_db[0]) and math.isinf(q.mean_psnr_db)  # the mean of dB breaks
    assert math.isfinite(q.video_psnr_db)  # the mean squared error does not
    assert q.worst_psnr_db == q.psnr_db[3] < q.video_psnr_db < q.psnr_db[1]


@pytest.mark.parametrize(
    "errors",
    [
        "independent full range",  # every error from -255 to 255
        "all brighter",  # distorted above the reference everywhere, by up to 255
        "all darker",
    ],
)
def test_psnr_on_full_range_frames_matches_scikit_image(errors):
    """Errors large and of both signs, where 8-bit arithmetic (a difference or a square taken
    in uint8) wraps around and gives another answer."""
    from skimage.metrics import peak_signal_noise_ratio

    rng = np.random.default_rng(7)
    shape = (4, 12, 16, 3)
    reference = rng.integers(0, 256, shape, dtype=np.uint8)
    distorted = rng.integers(0, 256, shape, dtype=np.uint8)
    if errors != "independent full range":
        low, high = np.minimum(reference, distorted), np.maximum(reference, distorted)
        reference, distorted = (low, high) if errors == "all brighter" else (high, low)
    difference = distorted.astype(np.int64) - reference
    assert np.abs(difference).max() >= 250
    assert (difference > 0).any() == (errors != "all darker")
    assert (difference < 0).any() == (errors != "all brighter")

    quality = frame_quality(reference, distorted)
    pairs = zip(reference, distorted, strict=True)
    expected = [peak_signal_noise_ratio(r, d, data_range=255) for r, d in pairs]
    np.testing.assert_allclose(quality.psnr_db, expected, rtol=1e-12)
    whole = peak_signal_noise_ratio(reference, distorted, data_range=255)
    assert quality.video_psnr_db == pytest.approx(whole, rel=1e-12)
    # Symmetric in its arguments, as a mean squared error is.
    assert frame_quality(distorted, reference).video_psnr_db == pytest.approx(whole, rel=1e-12)


def test_gap_to_noise_floor_sign():
    assert gap_to_noise_floor(60.0, 45.0) == 15.0  # sparse 15 dB further from dense than noise
    assert gap_to_noise_floor(45.0, 50.0) == -5.0  # sparse within the noise
    assert math.isinf(gap_to_noise_floor(math.inf, 45.0))  # exact floor, inexact sparse
    assert gap_to_noise_floor(math.inf, math.inf) == 0.0


def test_measure_and_quality_metrics_name_every_figure(tmp_path):
    dense = _smooth()
    rng = np.random.default_rng(4)

    def perturbed(amplitude):
        noise = rng.integers(-amplitude, amplitude + 1, dense.shape)
        return np.clip(dense.astype(int) + noise, 0, 255).astype(np.uint8)

    arms = {"dense": dense, "sparse": perturbed(8), "noise_floor": perturbed(1)}
    mkv = {}
    for label, frames in arms.items():
        mp4 = encode_mp4(frames, tmp_path / f"{label}.mp4")
        mkv[label] = encode_lossless(frames, lossless_path(mp4))
    sparse_q = measure(mkv["dense"], mkv["sparse"], _arm(dense), _arm(arms["sparse"], 0.5))
    floor_q = measure(mkv["dense"], mkv["noise_floor"], _arm(dense), _arm(arms["noise_floor"]))
    assert sparse_q.codec.video == tmp_path / "dense.mp4"  # the viewable sibling's codec noise
    m = quality_metrics(sparse_q, floor_q)
    assert set(m) == {
        "psnr_db",
        "psnr_worst_frame_db",
        "psnr_frames_db",
        "psnr_video_db",
        "ssim_frames",
        "lpips",
        "psnr_ffmpeg_db",
        "codec_psnr_db",
        "max_abs_latent_diff",
        "noise_floor_psnr_db",
        "noise_floor_psnr_worst_frame_db",
        "noise_floor_psnr_frames_db",
        "noise_floor_ssim_frames",
        "noise_floor_lpips",
        "noise_floor_psnr_ffmpeg_db",
        "noise_floor_max_abs_latent_diff",
        "gap_to_noise_floor_db",
    }
    assert m["psnr_db"] == m["psnr_video_db"] == sparse_q.frames.video_psnr_db
    assert m["psnr_ffmpeg_db"] == pytest.approx(m["psnr_db"], abs=0.01)  # lossless: no codec
    assert m["noise_floor_psnr_ffmpeg_db"] == pytest.approx(m["noise_floor_psnr_db"], abs=0.01)
    assert m["psnr_worst_frame_db"] <= m["psnr_db"]
    # The sparse arm is further from dense than the floor: a positive gap, floor minus sparse.
    assert m["noise_floor_psnr_db"] > m["psnr_db"]
    assert m["gap_to_noise_floor_db"] == pytest.approx(m["noise_floor_psnr_db"] - m["psnr_db"])
    assert m["gap_to_noise_floor_db"] > 0
    assert 25 < m["codec_psnr_db"] < 80 and m["max_abs_latent_diff"] == 0.5
    assert m["lpips"] > m["noise_floor_lpips"] > 0  # the stronger perturbation is further
    assert m["lpips"] == pytest.approx(float(np.mean(sparse_q.lpips)))
    # The papers' PSNR (the mean of per-frame PSNRs), against scikit-image's PSNR of each frame
    # of the lossless files the run wrote.
    from skimage.metrics import peak_signal_noise_ratio

    for label, key in (("sparse", "psnr_frames_db"), ("noise_floor", "noise_floor_psnr_frames_db")):
        pairs = zip(decode_mp4(mkv["dense"]), decode_mp4(mkv[label]), strict=True)
        per_frame = [peak_signal_noise_ratio(r, d, data_range=255) for r, d in pairs]
        assert m[key] == pytest.approx(float(np.mean(per_frame)), rel=1e-9)
    no_floor = quality_metrics(sparse_q, None)
    assert "gap_to_noise_floor_db" not in no_floor and "noise_floor_psnr_db" not in no_floor
    # Without a viewable sibling, the codec noise is that of the measured file itself: none.
    (tmp_path / "dense.mp4").unlink()
    again = measure(mkv["dense"], mkv["sparse"], _arm(dense), _arm(arms["sparse"]))
    assert math.isinf(again.codec.psnr_db)
