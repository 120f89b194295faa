"""The gate turns thresholds into exit codes, on fresh metrics and on stored MLflow runs."""

import math

import pytest

from evalharness.gate.cli import main
from evalharness.gate.verdict import check_gate
from evalharness.metric_names import Metric
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri


def test_gate_passes_and_fails_with_named_metric():
    ok = check_gate({"psnr_db": 30.0, "speedup": 1.5}, min_psnr_db=25, min_speedup=1.2)
    assert ok.passed and ok.exit_code == 0
    bad = check_gate({"psnr_db": 20.0, "speedup": 1.5}, min_psnr_db=25, min_speedup=1.2)
    assert not bad.passed and bad.exit_code == 1
    assert "psnr_db = 20" in bad.failures[0] and "25" in bad.failures[0]
    slow = check_gate({"psnr_db": 30.0, "speedup": 0.9}, min_psnr_db=None, min_speedup=1.0)
    assert slow.failures == ("speedup = 0.9 is below the threshold 1",)


@pytest.mark.parametrize("on", ["mean", "lcb", "worst"])
@pytest.mark.parametrize(
    "metric, threshold",
    [
        ("psnr_db", "min_psnr_db"),
        ("psnr_worst_frame_db", "min_worst_frame_psnr_db"),
        ("speedup", "min_speedup"),
    ],
)
def test_a_value_exactly_at_the_threshold_passes(metric, threshold, on):
    # The thresholds are minimums: equal passes, the next float below fails.
    name = metric if on == "mean" else f"{metric}_{on}"
    limit = 1.1 if metric == "speedup" else 30.0
    thresholds = {"min_psnr_db": None, "min_speedup": None, threshold: limit}
    assert check_gate({name: limit}, **thresholds, on=on).passed
    below = check_gate({name: math.nextafter(limit, 0.0)}, **thresholds, on=on)
    assert not below.passed and below.exit_code == 1
    assert below.failures[0].startswith(f"{name} = ")


def test_gate_reads_raw_frame_psnr_not_the_codec():
    assert (Metric.PSNR_DB, Metric.PSNR_WORST_FRAME_DB) == ("psnr_db", "psnr_worst_frame_db")
    # The default job: 52.6 dB on the raw frames, 37.6 dB through two CRF-18 encodes.
    job = {"psnr_db": 52.6, "psnr_ffmpeg_db": 37.6, "speedup": 1.5}
    assert check_gate(job, min_psnr_db=45, min_speedup=None).passed
    codec_good = {"psnr_db": 30.0, "psnr_ffmpeg_db": 60.0}
    assert not check_gate(codec_good, min_psnr_db=45, min_speedup=None).passed
    missing = check_gate({"psnr_ffmpeg_db": 60.0}, min_psnr_db=45, min_speedup=None)
    assert missing.failures == ("psnr_db is missing from the run's metrics (threshold 45)",)


def test_worst_frame_threshold_can_fail_while_the_mean_passes():
    metrics = {"psnr_db": 48.0, "psnr_worst_frame_db": 31.0, "speedup": 1.5}
    assert check_gate(metrics, min_psnr_db=40, min_speedup=1.2).passed  # off by default
    result = check_gate(metrics, min_psnr_db=40, min_speedup=1.2, min_worst_frame_psnr_db=35)
    assert result.failures == ("psnr_worst_frame_db = 31 is below the threshold 35",)
    assert check_gate(
        metrics, min_psnr_db=None, min_speedup=None, min_worst_frame_psnr_db=30
    ).passed


def test_older_runs_are_gated_on_their_raw_frame_psnr():
    old = {"psnr_ffmpeg_db": 37.6, "psnr_video_db": 52.6}  # logged before psnr_db existed
    assert check_gate(old, min_psnr_db=45, min_speedup=None).passed
    failed = check_gate(old, min_psnr_db=55, min_speedup=None)
    assert failed.failures == ("psnr_db (as psnr_video_db) = 52.6 is below the threshold 55",)


def test_gate_without_thresholds_passes_and_missing_metric_fails():
    assert check_gate({}, min_psnr_db=None, min_speedup=None).passed
    missing = check_gate({"speedup": 2.0}, min_psnr_db=10, min_speedup=None)
    assert "missing" in missing.failures[0]


def test_gate_nan_fails_and_identical_frames_pass():
    assert not check_gate({"speedup": float("nan")}, min_psnr_db=None, min_speedup=1).passed
    nan = float("nan")
    no_threshold = check_gate({"psnr_db": 16.2, "speedup": 2.0}, min_psnr_db=nan, min_speedup=nan)
    assert not no_threshold.passed and len(no_threshold.failures) == 2
    assert "not a finite number" in no_threshold.failures[0]
    assert not check_gate({"psnr_db": 99.0}, min_psnr_db=math.inf, min_speedup=None).passed
    exact = {"psnr_db": math.inf, "psnr_worst_frame_db": math.inf}
    assert check_gate(exact, min_psnr_db=60, min_speedup=None, min_worst_frame_psnr_db=60).passed


def test_gate_cli_on_stored_runs(tmp_path, capsys):
    uri = default_tracking_uri(tmp_path)
    for speedup in (0.8, 1.6):  # the latest finished run is the one checked
        tracker = MlflowTracker(uri, "ci", f"run-{speedup}")
        tracker.set_tags({"run_kind": "harness"})
        tracker.log_metrics(
            {
                "speedup": speedup,
                "psnr_db": 31.0,
                "psnr_worst_frame_db": 27.0,
                "psnr_ffmpeg_db": 45.0,
            }
        )
        tracker.finish("FINISHED")
    last_id = tracker.run_id
    common = ["--tracking-uri", uri, "--min-speedup", "1.2"]
    assert main(["--experiment", "ci", *common]) == 0
    assert main(["--experiment", "ci", *common, "--min-psnr-db", "32"]) == 1
    assert "psnr_db = 31" in capsys.readouterr().err
    assert main(["--experiment", "ci", *common, "--min-psnr-db", "30"]) == 0
    worst = ["--min-psnr-db", "30", "--min-worst-frame-psnr-db", "28"]
    assert main(["--experiment", "ci", *common, *worst]) == 1
    assert "psnr_worst_frame_db = 27" in capsys.readouterr().err
    assert (
        main(["--run-id", last_id, "--tracking-uri", uri, "--min-worst-frame-psnr-db", "27"]) == 0
    )
    # Nothing to judge is a refusal (2), never a missed gate (1).
    assert main(["--experiment", "nope", *common]) == 2
    assert "no MLflow experiment named 'nope'" in capsys.readouterr().err
    assert main(["--run-id", "not-a-run", *common]) == 2
    assert "run 'not-a-run' cannot be read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["--experiment", "ci", "--tracking-uri", uri])  # no threshold at all
    assert usage.value.code == 2


def test_a_run_without_thresholds_is_not_gated_never_passed():
    metrics = {"psnr_db": 10.0, "speedup": 0.5}
    none = check_gate(metrics, min_psnr_db=None, min_speedup=None)
    assert none.passed and not none.gated and none.outcome == "not gated"
    assert check_gate(metrics, min_psnr_db=5, min_speedup=None).outcome == "passed"
    assert check_gate(metrics, min_psnr_db=20, min_speedup=None).outcome == "failed"


def test_a_missing_store_is_refused_without_creating_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "mlflow.db"
    common = ["--experiment", "ci", "--min-speedup", "1.2"]
    assert main([*common, "--tracking-uri", f"sqlite:///{missing}"]) == 2
    assert f"no tracking store at {missing}" in capsys.readouterr().err
    assert main([*common, "--output-root", str(tmp_path / "outputs")]) == 2
    assert "--output-root" in capsys.readouterr().err
    assert not missing.parent.exists() and not (tmp_path / "outputs").exists()
