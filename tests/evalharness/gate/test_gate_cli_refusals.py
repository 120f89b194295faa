"""``python -m evalharness.gate`` on deleted runs and experiments (nothing to judge: exit 2) and
on a missed threshold (exit 1 with one ``error:`` line naming the metric, value and threshold)."""

import pytest
from mlflow import MlflowClient

from evalharness.gate.cli import main
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri

GOOD = {"speedup": 1.6, "psnr_db": 31.0, "psnr_worst_frame_db": 27.0}


def _harness_run(uri: str, experiment: str) -> str:
    tracker = MlflowTracker(uri, experiment, "harness")
    tracker.set_tags({"run_kind": "harness"})
    tracker.log_metrics(GOOD)
    tracker.finish("FINISHED")
    return tracker.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A live harness run, a deleted one, and one in an experiment that was deleted."""
    uri = default_tracking_uri(tmp_path_factory.mktemp("gate-deleted"))
    client = MlflowClient(uri)
    ids = {"live": _harness_run(uri, "ci"), "deleted": _harness_run(uri, "ci")}
    client.delete_run(ids["deleted"])
    ids["experiment deleted"] = _harness_run(uri, "gone")
    client.delete_experiment(client.get_experiment_by_name("gone").experiment_id)
    return uri, ids


@pytest.mark.parametrize("which", ["deleted", "experiment deleted"])
def test_a_deleted_run_named_by_its_id_is_nothing_to_judge(store, capsys, which):
    uri, ids = store
    code = main(["--run-id", ids[which], "--tracking-uri", uri, "--min-speedup", "1.2"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: gate: "), err
    assert f"run {ids[which]}" in err and "is deleted" in err and "nothing to judge" in err
    assert "mlflow runs restore" in err or "mlflow experiments restore" in err


def test_a_deleted_experiment_named_by_its_name_is_refused(store, capsys):
    uri, _ = store
    code = main(["--experiment", "gone", "--tracking-uri", uri, "--min-speedup", "1.2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: gate: ") and "'gone'" in err and "is deleted" in err
    assert "mlflow experiments restore --experiment-id" in err


def test_a_missed_threshold_ends_with_one_error_line_naming_metric_value_and_threshold(
    store, capsys
):
    uri, ids = store
    code = main(
        [
            "--run-id",
            ids["live"],
            "--tracking-uri",
            uri,
            "--min-speedup",
            "2",
            "--min-psnr-db",
            "35",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, captured.err
    assert "speedup = 1.6 is below the threshold 2" in errors[0]
    assert "psnr_db = 31 is below the threshold 35" in errors[0]
    assert "passed" not in captured.out


def test_a_passing_gate_prints_no_error_line(store, capsys):
    uri, ids = store
    assert main(["--run-id", ids["live"], "--tracking-uri", uri, "--min-speedup", "1.5"]) == 0
    captured = capsys.readouterr()
    assert "error:" not in captured.err and f"gate passed for run {ids['live']}" in captured.out
