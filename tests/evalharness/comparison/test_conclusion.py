"""The run's conclusion: the gate judges what was measured, the results are written once, the
tracker's run is closed, and the folder says ``finished`` last."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evalharness.comparison import Measured, Outcome, conclude
from evalharness.config import to_config
from evalharness.estimates import JobEstimate, PhaseEstimate
from evalharness.evidence import run_status
from evalharness.metric_names import RunMetrics
from evalharness.phases import Phase, PhaseLedger
from tests.helpers.harness_config import small_config


class RecordingTracker:
    """A tracker that records its calls, and what the folder's status said at each."""

    run_id = "run-123"
    tracking_uri = None
    experiment_id = None

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.calls = []

    def _record(self, name, value):
        status = (run_status.read_status(self.run_dir) or {}).get("status")
        self.calls.append((name, value, status))

    def log_metrics(self, metrics, step=None):
        self._record("log_metrics", dict(metrics))

    def set_tags(self, tags):
        self._record("set_tags", dict(tags))

    def log_artifacts(self, folder, exclude=()):
        self._record("log_artifacts", tuple(exclude))

    def finish(self, status):
        self._record("finish", status)


def _pair(psnr: float, speedup: float, name: str) -> RunMetrics:
    return RunMetrics.of(
        {
            "psnr_db": psnr,
            "psnr_worst_frame_db": psnr - 3.0,
            "ssim_frames": 0.97,
            "lpips": 0.0421,
            "psnr_frames_db": psnr + 0.5,
            "speedup": speedup,
            "dense_median_s": 1.0,
            "sparse_median_s": 1.0 / speedup,
            "dense_control": "dense",
            "tokens": 144,
            "pair": name,
            "seed": 0,
            "prompt": f"prompt {name}",
        }
    )


def _comparison(tmp_path, *overrides, wall_s: float = 1.0):
    cfg = to_config(small_config(tmp_path, *overrides))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_status.start_status(run_dir, mlflow_run_id="run-123", tracking_uri=None)
    flops = SimpleNamespace(as_metrics=lambda: {"flops_dense_tflop": 2.5})
    tracker = RecordingTracker(run_dir)
    sizing = SimpleNamespace(
        estimate=JobEstimate((PhaseEstimate(Phase.TIMING, 10.0, "measured"),)),
        timing=SimpleNamespace(to_markdown=lambda: "the FLOP model's table"),
    )
    times = iter([0.0, 4.0, 4.0 + wall_s / 2, wall_s])  # ledger start, timing in/out, snapshot
    ledger = PhaseLedger(clock=lambda: next(times), memory=lambda: None)
    with ledger.timed(Phase.TIMING):
        pass
    return SimpleNamespace(
        cfg=cfg,
        plan=SimpleNamespace(flops=flops, sizing=sizing),
        run_dir=run_dir,
        tracker=tracker,
        progress=SimpleNamespace(ledger=ledger),
    )


def test_one_pair_is_judged_written_uploaded_then_marked_finished(tmp_path):
    comparison = _comparison(
        tmp_path,
        "gate.min_psnr_db=20",
        "gate.min_speedup=1.5",
        "logger.log_videos=false",
        wall_s=12.0,
    )
    pair = _pair(28.0, 1.2, "p0-s0")
    outcome = conclude(comparison, Measured(pair, (pair,)))

    assert isinstance(outcome, Outcome)
    assert not outcome.gate.passed and any("speedup" in f for f in outcome.gate.failures)
    written = json.loads((comparison.run_dir / "metrics.json").read_text())
    # The folder's metrics.json holds what was measured and the verdict; the returned metrics
    # add where it was written and the tracker's run.
    assert written["gate_passed"] is False and written["total_wall_s"] == 12.0
    assert written["flops_dense_tflop"] == 2.5 and "run_dir" not in written
    # The phases so far, the unaccounted rest and the estimate beside them, in the same files.
    assert written["phase_timing_s"] == pytest.approx(6.0)
    assert written["phase_unaccounted_s"] == pytest.approx(12.0 - 6.0)
    assert written["estimate_wall_s"] == 10.0
    phases = json.loads((comparison.run_dir / "phases.json").read_text())
    assert phases["phases"]["timing"]["seconds"] == pytest.approx(6.0)
    plan = (comparison.run_dir / "time_plan.md").read_text()
    assert "| timing | 10.0 | 6.0 | 0.60 | measured |" in plan
    assert outcome.metrics["run_dir"] == str(comparison.run_dir)
    assert outcome.metrics["mlflow_run_id"] == "run-123"
    report = (comparison.run_dir / "report.md").read_text()
    assert "FAILED" in report and "speedup" in report
    assert not (comparison.run_dir / "pairs.csv").exists()

    calls = comparison.tracker.calls
    assert [name for name, _, _ in calls] == ["log_metrics", "set_tags", "log_artifacts", "finish"]
    assert calls[1][1]["gate"] == "failed"
    assert set(calls[2][1]) == {"pairs/*", "*.mp4", "*.mkv"}  # videos stay local, as asked
    # Every upload happens while the folder still says running; finished comes last.
    assert {status for _, _, status in calls} == {run_status.RUNNING}
    assert run_status.read_status(comparison.run_dir)["status"] == run_status.FINISHED
    assert run_status.read_status(comparison.run_dir)["gate_passed"] is False
    assert outcome.summary.splitlines()[0] in calls[1][1]["mlflow.note.content"]
    assert outcome.summary.splitlines()[-1] == f"run folder: {comparison.run_dir}"


def test_a_suite_writes_its_pairs_table_and_passes_on_the_mean(tmp_path):
    comparison = _comparison(
        tmp_path, "prompts=smoke", "gate.min_psnr_db=20", "gate.min_speedup=1.1"
    )
    pairs = (_pair(28.0, 1.2, "p0-s0"), _pair(30.0, 1.3, "p1-s0"))
    parent = RunMetrics.of({"psnr_db": 29.0, "speedup": 1.25, "tokens": 144})
    outcome = conclude(comparison, Measured(parent, pairs))

    assert outcome.gate.passed and outcome.metrics["gate_passed"] is True
    rows = (comparison.run_dir / "pairs.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[1].startswith("p0-s0")
    assert "2 pairs" in (comparison.run_dir / "report.md").read_text()
    assert comparison.tracker.calls[1][1]["gate"] == "passed"
    assert comparison.tracker.calls[2][1] == ("pairs/*",)  # each pair uploads its own folder


def test_gate_max_lpips_and_the_papers_psnr_reach_the_verdict_and_the_report(tmp_path):
    comparison = _comparison(tmp_path, "gate.max_lpips=0.03", "gate.psnr=frames")
    comparison.cfg.gate.min_psnr_db = 28.2  # psnr_db 28.0 would fail; psnr_frames_db is 28.5
    pair = _pair(28.0, 1.2, "p0-s0")
    outcome = conclude(comparison, Measured(pair, (pair,)))
    assert outcome.gate.failures == ("lpips = 0.0421 is above the threshold 0.03",)
    assert "LPIPS 0.0421" in outcome.summary
    report = (comparison.run_dir / "report.md").read_text()
    assert "LPIPS, AlexNet" in report and "0.0421" in report and "28.50" in report


@pytest.mark.parametrize("speedup", [float("nan"), float("inf")])
def test_a_non_finite_measurement_is_written_as_valid_json(tmp_path, speedup):
    comparison = _comparison(tmp_path, "gate.min_speedup=1.1")
    pair = _pair(28.0, speedup, "p0-s0")
    outcome = conclude(comparison, Measured(pair, (pair,)))
    written = json.loads((comparison.run_dir / "metrics.json").read_text())
    assert written["speedup"] in (None, "inf")
    assert outcome.gate.passed is (speedup == float("inf"))
