"""The gate turns thresholds into exit codes, on fresh metrics and on stored MLflow runs."""

import pytest

from evalharness.gate import check_gate, main
from evalharness.tracking import MlflowTracker, default_tracking_uri


def test_gate_passes_and_fails_with_named_metric():
    ok = check_gate({"psnr_ffmpeg_db": 30.0, "speedup": 1.5}, min_psnr_db=25, min_speedup=1.2)
    assert ok.passed and ok.exit_code == 0
    bad = check_gate({"psnr_ffmpeg_db": 20.0, "speedup": 1.5}, min_psnr_db=25, min_speedup=1.2)
    assert not bad.passed and bad.exit_code == 1
    assert "psnr_ffmpeg_db = 20" in bad.failures[0] and "25" in bad.failures[0]
    slow = check_gate({"psnr_ffmpeg_db": 30.0, "speedup": 0.9}, min_psnr_db=None, min_speedup=1.0)
    assert slow.failures == ("speedup = 0.9 is below the threshold 1",)


def test_gate_without_thresholds_passes_and_missing_metric_fails():
    assert check_gate({}, min_psnr_db=None, min_speedup=None).passed
    missing = check_gate({"speedup": 2.0}, min_psnr_db=10, min_speedup=None)
    assert "missing" in missing.failures[0]


def test_gate_nan_fails():
    assert not check_gate({"speedup": float("nan")}, min_psnr_db=None, min_speedup=1).passed


def test_gate_cli_on_stored_runs(tmp_path, capsys):
    uri = default_tracking_uri(tmp_path)
    for speedup in (0.8, 1.6):  # the latest finished run is the one checked
        tracker = MlflowTracker(uri, "ci", f"run-{speedup}")
        tracker.log_metrics({"speedup": speedup, "psnr_ffmpeg_db": 31.0})
        tracker.finish("FINISHED")
    last_id = tracker.run_id
    common = ["--tracking-uri", uri, "--min-speedup", "1.2"]
    assert main(["--experiment", "ci", *common]) == 0
    assert main(["--experiment", "ci", *common, "--min-psnr-db", "32"]) == 1
    assert "psnr_ffmpeg_db = 31" in capsys.readouterr().err
    assert main(["--run-id", last_id, *common]) == 0
    with pytest.raises(SystemExit, match="no MLflow experiment"):
        main(["--experiment", "nope", *common])
