"""Run-folder artifacts and the one list of headline metrics the console and sweep table share."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from evalharness.comparison.sweep import summary_table
from evalharness.evidence.quality import measure, quality_metrics
from evalharness.evidence.results import write_report
from evalharness.evidence.run_folder import (
    HEADLINE_METRICS,
    VIDEO_PATTERNS,
    headline_columns,
    headline_row,
    summary_lines,
    write_arm_videos,
    write_frame_quality,
    write_metrics,
)
from evalharness.evidence.video import decode_mp4
from evalharness.tracking.mlflow_client import artifact_files

METRICS = {
    "schedule": "balanced",
    "schedule_kept_fraction": 0.5,
    "dense_median_s": 2.0,
    "sparse_median_s": 1.0,
    "speedup": 2.0,
    "dense_control": "cudnn",
    "speedup_vs_dense_arm": 3.0,
    "psnr_db": 31.234,
    "psnr_worst_frame_db": 28.5,
    "psnr_ffmpeg_db": 31.24,
    "psnr_frames_db": 30.5,
    "ssim_frames": 0.98765,
    "lpips": 0.012345,
    "noise_floor_psnr_db": math.inf,
    "gap_to_noise_floor_db": math.inf,
    "dense_cache": "hit",
    "run_dir": "/tmp/run",
    "tokens": 144,
}


def test_sweep_table_and_summary_row_follow_the_headline_list():
    keys = [h.key for h in HEADLINE_METRICS]
    assert [key for _, key, _ in headline_columns()] == keys
    assert list(headline_row(METRICS)) == [*keys, "run_dir"]
    job = {**headline_row(METRICS), "sweep_job": 3, "status": "FINISHED"}
    header, _, row = summary_table([job]).splitlines()
    assert header.count("|") == len(keys) + 3  # job number first, status last
    assert row == (
        "| 3 | balanced | 0.500 | 2.000 | 1.000 | 2.000x | cudnn | 3.000x | 31.23 | 28.50 | inf "
        "| inf | 0.9877 | 0.0123 | hit | FINISHED |"
    )


def test_console_summary_uses_the_headline_formats():
    assert summary_lines(METRICS) == (
        "dense 2.000 s | sparse 1.000 s | speedup 2.000x vs cudnn (3.000x vs our dense arm) | PSNR "
        "31.23 dB (worst frame 28.50 dB; noise floor inf dB, gap inf dB) | SSIM 0.9877 "
        "| LPIPS 0.0123 | dense arm hit\nrun folder: /tmp/run"
    )


def test_missing_headline_metrics_show_as_dashes():
    row = headline_row({"schedule": "dense"})
    assert row["speedup"] is None and row["run_dir"] is None
    assert "noise floor - dB" in summary_lines({"speedup": 1.0})


def test_metrics_json_stays_valid_with_inf_and_nan(tmp_path):
    path = write_metrics(tmp_path, {"a": math.inf, "b": math.nan, "c": 1.5})
    assert json.loads(path.read_text()) == {"a": "inf", "b": None, "c": 1.5}


def _frames(seed, t=4, h=32, w=48):
    return np.random.default_rng(seed).integers(0, 256, (t, h, w, 3), dtype=np.uint8)


def test_arm_videos_one_to_watch_one_to_measure(tmp_path):
    dense = SimpleNamespace(label="dense", frames=_frames(0), latents=np.zeros(3))
    sparse = SimpleNamespace(label="sparse", frames=_frames(1), latents=np.ones(3))
    cfg = SimpleNamespace(fps=16, crf=18)
    videos = write_arm_videos(tmp_path, dense, sparse, None, cfg)
    assert (videos.dense, videos.sparse, videos.noise_floor) == (
        tmp_path / "dense.lossless.mkv",
        tmp_path / "sparse.lossless.mkv",
        None,
    )
    assert (videos.dense_mp4, videos.sparse_mp4, videos.noise_floor_mp4) == (
        tmp_path / "dense.mp4",
        tmp_path / "sparse.mp4",
        None,
    )
    np.testing.assert_array_equal(decode_mp4(videos.sparse), sparse.frames)
    assert not artifact_files(tmp_path, VIDEO_PATTERNS)  # log_videos=false keeps all four out
    quality = measure(videos.dense, videos.sparse, dense, sparse)
    assert quality.codec.video == videos.dense_mp4
    plot, arrays = write_frame_quality(tmp_path, quality)
    assert plot.stat().st_size > 1000
    with np.load(arrays) as saved:
        assert set(saved.files) == {
            "psnr_frames_db",
            "ssim_frames",
            "lpips_frames",
            "psnr_ffmpeg_db",
            "codec_psnr_frames_db",
        }
    metrics = quality_metrics(quality, None)
    assert metrics["psnr_ffmpeg_db"] == pytest.approx(metrics["psnr_db"], abs=0.01)


def _report_cfg(**gate):
    thresholds = {"min_psnr_db": None, "min_speedup": None, **gate}
    return SimpleNamespace(
        model=SimpleNamespace(name="tiny-planted"),
        resolution=SimpleNamespace(name="cpu"),
        schedule=SimpleNamespace(name="balanced"),
        prompt="a fox",
        seed=0,
        steps=2,
        sampler="unipc",
        guidance_scale=5.0,
        dtype="float32",
        gate=SimpleNamespace(**thresholds),
    )


def test_report_shows_raw_psnr_noise_floor_gap_and_codec(tmp_path):
    metrics = {**METRICS, "codec_psnr_db": 44.7, "noise_floor_psnr_worst_frame_db": 80.0}
    text = write_report(tmp_path, _report_cfg(), metrics, []).read_text()
    assert "| PSNR, raw frames (gated; from the mean MSE) | 31.23 dB |" in text
    assert "| PSNR, worst frame | 28.50 dB |" in text
    assert "| Gap to the noise floor (floor - sparse) | inf dB |" in text
    assert "| PSNR, FFmpeg on the lossless videos (cross-check) | 31.24 dB |" in text
    assert "| Codec noise: dense.mp4 vs its raw frames | 44.70 dB |" in text
    assert "`dense.lossless.mkv`" in text and "Not gated: no thresholds set" in text


def test_report_gate_verdict_names_the_thresholds_set(tmp_path):
    # A configuration from before the worst-frame threshold (no such field) still reports.
    text = write_report(tmp_path, _report_cfg(min_psnr_db=30.0), METRICS, []).read_text()
    assert "Passed (min PSNR 30.0 dB)." in text
    cfg = _report_cfg(min_speedup=1.5, min_worst_frame_psnr_db=25.0)
    text = write_report(tmp_path, cfg, METRICS, []).read_text()
    assert "Passed (min worst-frame PSNR 25.0 dB, min speedup 1.5)." in text
    failure = "psnr_worst_frame_db = 28.5 is below the threshold 30"
    cfg = _report_cfg(min_worst_frame_psnr_db=30.0)
    assert f"- FAILED: {failure}" in write_report(tmp_path, cfg, METRICS, [failure]).read_text()
