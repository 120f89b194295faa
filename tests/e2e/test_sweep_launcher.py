"""Sweeps through a real Hydra launcher: the submitit plugin's local executor runs each job in its
own process; the sweep table is read back from MLflow by the sweep's tag, and a job's missed gate
reaches the launching command's exit code."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from evalharness.comparison import sweep
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri
from tests.helpers.harness_config import SMALL

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[test]'")


def _sweep(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "evalharness",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=20",
        "schedule=conservative,aggressive",
        *SMALL,
        "noise_floor=false",
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        *overrides,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_submitit_jobs_run_in_their_own_processes_and_the_table_comes_from_mlflow(tmp_path):
    out = _sweep(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    client = MlflowClient(default_tracking_uri(tmp_path / "o"))
    experiment = client.get_experiment_by_name("evalharness")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    sweep_ids = {r.data.tags["sweep"] for r in runs}
    assert len(sweep_ids) == 1
    assert sweep_ids == {(tmp_path / "o" / "multirun" / "sweep_id").read_text().strip()}
    assert sorted(r.data.tags["sweep_job"] for r in runs) == ["0", "1"]
    # Each job ran in its own process (submitit's local executor), not in the launcher's.
    pids = {r.data.tags.get("pid") for r in runs}
    assert len(pids) == 2 and None not in pids
    assert "Multirun summary (2 jobs, from MLflow" in out.stdout
    table = [line for line in out.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [row.split("|")[2].strip() for row in table] == ["conservative", "aggressive"]
    # One dense arm: the jobs share it through the cache (written once, renamed into place).
    assert len(list((tmp_path / "c" / "dense_arms").iterdir())) == 1


@pytest.mark.slow  # the same path in-process: test_sweep_table_from_mlflow_names_failed_jobs
def test_a_job_that_misses_its_gate_fails_the_launching_command(tmp_path):
    out = _sweep(tmp_path, "gate.min_speedup=1000")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "failed (gate or run): job 0 (conservative), job 1 (aggressive)" in out.stdout


def test_sweep_table_from_mlflow_names_failed_jobs(tmp_path, capsys):
    """The callback on runs logged as three jobs would: one passes, one misses its gate, one
    crashed; a run of another sweep and a suite's child run are left out."""
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(tmp_path / "multirun")}},
            "logger": {"kind": "mlflow", "tracking_uri": None, "experiment_name": "evalharness"},
            "output_root": str(tmp_path / "o"),
            "dry_run": False,
        }
    )
    callback = sweep.SweepSummary()
    callback.on_multirun_start(config)
    sweep_id = sweep.read_sweep_id(tmp_path / "multirun")
    uri = default_tracking_uri(tmp_path / "o")

    def job(num, schedule, gate_passed, status, tags=None):
        tracker = MlflowTracker(uri, "evalharness", f"job{num}")
        tracker.set_tags(
            {"schedule": schedule, "sweep": sweep_id, "sweep_job": str(num), **(tags or {})}
        )
        tracker.log_metrics({"speedup": 1.5, "psnr_db": 40.0, "gate_passed": gate_passed})
        tracker.finish(status)
        return tracker

    first = job(0, "conservative", 1, "FINISHED")
    job(2, "balanced", 1, "FAILED")
    job(1, "aggressive", 0, "FINISHED")
    job(5, "other-sweep", 0, "FINISHED", {"sweep": "another"})
    job(6, "pair", 0, "FINISHED", {"mlflow.parentRunId": first.run_id})
    callback.on_multirun_end(config)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["0", "1", "2"]
    assert [r.split("|")[2].strip() for r in rows] == ["conservative", "aggressive", "balanced"]
    assert sweep.failed_jobs() == ["job 1 (aggressive)", "job 2 (balanced)"]
    assert (tmp_path / "multirun" / "summary.md").read_text().count("\n") == 5
    callback.on_multirun_start(config)  # a new sweep forgets the old one's failures
    assert sweep.failed_jobs() == []
    assert sweep.read_sweep_id(tmp_path / "multirun") != sweep_id


def test_a_job_without_the_sweep_callback_is_told_what_to_configure(tmp_path):
    with pytest.raises(FileNotFoundError, match="SweepSummary"):
        sweep.read_sweep_id(tmp_path)
