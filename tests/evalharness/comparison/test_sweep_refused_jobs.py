"""A sweep's table lists every job: one refused before its MLflow run existed (or with
``logger=none``) has its row, marked REFUSED, beside the jobs that ran."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from evalharness.comparison import sweep
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri


def _config(tmp_path, kind: str):
    return OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(tmp_path / "multirun")}},
            "logger": {"kind": kind, "tracking_uri": None, "experiment_name": "evalharness"},
            "output_root": str(tmp_path / "o"),
            "dry_run": False,
        }
    )


def _table_rows(out: str) -> list[list[str]]:
    lines = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[1:]]


def test_a_refused_job_has_its_row_beside_the_mlflow_runs(tmp_path, capsys):
    config = _config(tmp_path, "mlflow")
    callback = sweep.SweepSummary()
    callback.on_multirun_start(config)
    sweep_id = sweep.read_sweep_id(tmp_path / "multirun")
    tracker = MlflowTracker(default_tracking_uri(tmp_path / "o"), "evalharness", "job1")
    tracker.set_tags({"schedule": "balanced", "sweep": sweep_id, "sweep_job": "1"})
    tracker.log_metrics({"speedup": 1.5, "psnr_db": 40.0, "gate_passed": 1})
    tracker.finish("FINISHED")
    sweep.record_unfinished_job(tmp_path / "multirun", 0, "balanced", 2)  # no MLflow run
    callback.on_multirun_end(config)
    out = capsys.readouterr().out
    assert "(2 jobs," in out
    rows = _table_rows(out)
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("0", "balanced", "REFUSED (exit 2)"),
        ("1", "balanced", "FINISHED"),
    ]
    assert (tmp_path / "multirun" / "summary.md").read_text().count("REFUSED (exit 2)") == 1
    assert sweep.failed_jobs() == ["job 0 (balanced)"]


@pytest.mark.parametrize(("code", "status"), [(2, "REFUSED (exit 2)"), (4, "FAILED (exit 4)")])
def test_without_tracking_an_unfinished_job_has_its_row(tmp_path, capsys, code, status):
    config = _config(tmp_path, "none")
    callback = sweep.SweepSummary()
    callback.on_multirun_start(config)
    folder = tmp_path / "multirun"
    sweep.append_summary(folder, {"sweep_job": 0, "schedule": "balanced", "status": "FINISHED"})
    sweep.record_unfinished_job(folder, 1, "balanced", code)
    callback.on_multirun_end(config)
    out = capsys.readouterr().out
    assert "(2 jobs," in out
    assert [r[-1] for r in _table_rows(out)] == ["FINISHED", status]
