"""``python -m evalharness.search`` end to end on the small CPU config: a 2-trial study
interrupted after its first trial and resumed (the interrupted trial runs again), every trial an
MLflow child of one parent, the recommended schedule's file rerun as a plain run that passes the
gate, and a threshold no trial meets (exit 1 with the best value reached)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from evalharness.run import run
from evalharness.search import front, run_search, study_run
from tests.helpers.search_config import SEARCH, compose_cfg

pytestmark = pytest.mark.slow


def test_interrupted_search_resumes_and_its_schedule_passes_as_a_run(tmp_path, monkeypatch):
    args = [*SEARCH, "search.trials=2", "search.study_name=s", "gate.min_psnr_db=10"]
    real, calls = study_run.run_trial, []

    def interrupted_second(cfg):
        calls.append(cfg)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(cfg)

    monkeypatch.setattr(study_run, "run_trial", interrupted_second)
    # Whether the tiny config's sparse arm beats dense depends on the machine's load; this test is
    # about resuming, so any feasible trial may be recommended (the speed rule: test_front.py).
    monkeypatch.setattr(front, "DENSE_SPEEDUP", 0.0)
    with pytest.raises(KeyboardInterrupt):
        run_search(compose_cfg(tmp_path, *args))
    folder = tmp_path / "outputs" / "searches" / "s"
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'optuna.db'}")
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "FAIL"] and study.trials[1].user_attrs["interrupted"]
    assert (folder / "front.md").is_file()  # the first trial's answer was kept
    lost = study.trials[1].params

    monkeypatch.setattr(study_run, "run_trial", real)
    result = run_search(compose_cfg(tmp_path, *args, "search.resume=true"))
    assert result.code == 0 and len(result.answer.points) == 2
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{folder / 'optuna.db'}")
    assert study.trials[2].params == lost  # the interrupted trial ran again
    for t in study.trials:
        if t.state.name == "COMPLETE":
            assert t.constraints["psnr_db_mean"] <= 0  # 10 dB is met: constraints <= 0

    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalharness")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("run_kind") == "search"]
    assert parent.info.status == "FINISHED"
    trials = [r for r in runs if r.data.tags.get("search_trial")]
    assert trials and all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in trials)
    # search.routing_stats=false (the default): no trial recorded its routing.
    for r in trials:
        assert "routing_temporal_fraction" not in r.data.metrics
        assert not list(Path(r.data.tags["run_dir"]).rglob("routing_stats.npz"))
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"front.md", "front.png", "summary.json", "conf"} <= artifacts

    path = result.answer.schedule_path
    assert path == folder / "conf" / "schedule" / "searched-s.yaml"
    rerun = compose_cfg(
        tmp_path,
        f"hydra.searchpath=[file://{folder / 'conf'}]",
        "schedule=searched-s",
        "gate.min_psnr_db=10",
        "logger=none",
        "progress=off",
        name="config",
    )
    metrics = run(rerun)  # a missed gate would raise GateFailed (exit 1)
    assert metrics["gate_passed"]
    # The plain run records the chosen schedule's routing (routing_stats defaults to true).
    assert "routing_temporal_fraction" in metrics
    assert list(Path(metrics["run_dir"]).rglob("routing_stats.npz"))


def test_a_threshold_no_trial_meets_ends_with_the_best_value(tmp_path):
    args = [*SEARCH, "search.trials=1", "gate.min_psnr_db=500", "logger=none"]
    result = run_search(compose_cfg(tmp_path, *args))
    assert result.code == 1 and result.answer.recommended is None
    assert "psnr_db_mean: best" in result.message and "never met" in result.message
    assert not list((tmp_path / "outputs" / "searches").rglob("*.yaml"))
