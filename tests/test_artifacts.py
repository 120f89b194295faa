"""Run-folder artifacts and the one list of headline metrics the console and sweep table share."""

import json
import math

from evalharness.artifacts import (
    HEADLINE_METRICS,
    headline_columns,
    headline_row,
    summary_lines,
    write_metrics,
)
from evalharness.sweep import summary_table

METRICS = {
    "schedule": "balanced",
    "schedule_kept_fraction": 0.5,
    "dense_median_s": 2.0,
    "sparse_median_s": 1.0,
    "speedup": 2.0,
    "dense_control": "cudnn",
    "speedup_vs_b0": 3.0,
    "psnr_ffmpeg_db": 31.234,
    "psnr_frames_db": 30.5,
    "ssim_frames": 0.98765,
    "noise_floor_psnr_db": math.inf,
    "dense_cache": "hit",
    "run_dir": "/tmp/run",
    "tokens": 144,
}


def test_sweep_table_and_summary_row_follow_the_headline_list():
    keys = [h.key for h in HEADLINE_METRICS]
    assert [key for _, key, _ in headline_columns()] == keys
    assert list(headline_row(METRICS)) == [*keys, "run_dir"]
    header, _, row = summary_table([headline_row(METRICS)]).splitlines()
    assert header.count("|") == len(keys) + 1
    assert row == (
        "| balanced | 0.500 | 2.000 | 1.000 | 2.000x | cudnn | 3.000x | 31.23 | 30.50 | 0.9877 "
        "| inf | hit |"
    )


def test_console_summary_uses_the_headline_formats():
    assert summary_lines(METRICS) == (
        "dense 2.000 s | sparse 1.000 s | speedup 2.000x vs cudnn (3.000x vs our B0) | PSNR "
        "31.23 dB (noise floor inf dB) | SSIM 0.9877 | dense arm hit\nrun folder: /tmp/run"
    )


def test_missing_headline_metrics_show_as_dashes():
    row = headline_row({"schedule": "dense"})
    assert row["speedup"] is None and row["run_dir"] is None
    assert "noise floor - dB" in summary_lines({"speedup": 1.0})


def test_metrics_json_stays_valid_with_inf_and_nan(tmp_path):
    path = write_metrics(tmp_path, {"a": math.inf, "b": math.nan, "c": 1.5})
    assert json.loads(path.read_text()) == {"a": "inf", "b": None, "c": 1.5}
