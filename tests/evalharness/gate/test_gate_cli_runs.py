"""``python -m evalharness.gate`` judges finished harness runs only, refuses thresholds that are
not finite numbers >= 0, and refuses an unusable store: each with exit 2 and one ``error:`` line."""

import os

import pytest

from evalharness.gate.cli import main
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri

GOOD = {"speedup": 1.6, "psnr_db": 31.0, "psnr_worst_frame_db": 27.0}


def _run(uri: str, kind: str | None, status: str, metrics: dict, name: str, exp="ci") -> str:
    tracker = MlflowTracker(uri, exp, name)
    if kind is not None:
        tracker.set_tags({"run_kind": kind})
    tracker.log_metrics(metrics)
    tracker.finish(status)
    return tracker.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One good harness run, then newer runs the gate must not judge as "the latest"."""
    uri = default_tracking_uri(tmp_path_factory.mktemp("gate-store"))
    ids = {"harness": _run(uri, "harness", "FINISHED", GOOD, "harness")}
    # Newer: a report, a search, a benchmark (none has a psnr_db), an untagged run, and harness
    # runs that failed or were killed with metrics that would pass.
    for kind in ("report", "search", "benchmark", None):
        ids[str(kind)] = _run(uri, kind, "FINISHED", {"runs": 1.0}, f"{kind}")
    for status in ("FAILED", "KILLED"):
        ids[status] = _run(uri, "harness", status, {**GOOD, "speedup": 9.0}, status)
    _run(uri, "report", "FINISHED", {"runs": 1.0}, "report", exp="reports-only")
    return uri, ids


def test_the_latest_run_is_the_latest_finished_harness_run(store, capsys):
    uri, ids = store
    assert main(["--experiment", "ci", "--tracking-uri", uri, "--min-speedup", "1.2"]) == 0
    assert f"gate passed for run {ids['harness']}" in capsys.readouterr().out
    # Had a FAILED harness run (speedup 9) been read, this would pass.
    assert main(["--experiment", "ci", "--tracking-uri", uri, "--min-speedup", "2"]) == 1


@pytest.mark.parametrize(
    "which, why",
    [
        ("FAILED", "is FAILED, not FINISHED"),
        ("KILLED", "is KILLED, not FINISHED"),
        ("report", "is a report run (tag run_kind=report), not a harness run"),
        ("search", "is a search run"),
        ("benchmark", "is a benchmark run"),
        ("None", "is a untagged run"),
    ],
)
def test_a_run_id_that_is_not_a_finished_harness_run_is_refused(store, capsys, which, why):
    uri, ids = store
    code = main(["--run-id", ids[which], "--tracking-uri", uri, "--min-speedup", "1.2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: gate: ") and why in err and "Traceback" not in err


def test_an_experiment_without_a_harness_run_is_refused(store, capsys):
    uri, _ = store
    assert main(["--experiment", "reports-only", "--tracking-uri", uri, "--min-speedup", "1"]) == 2
    assert "has no finished harness run" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["garbage", "empty folder as file"])
def test_an_unusable_store_is_refused_with_exit_2(tmp_path, capsys, how):
    db = tmp_path / "mlflow.db"
    if how == "garbage":
        db.write_bytes(os.urandom(4096))
    else:
        db.mkdir()
    for where in (["--tracking-uri", f"sqlite:///{db}"], ["--output-root", str(tmp_path)]):
        assert main(["--experiment", "ci", *where, "--min-speedup", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: gate: ") and "Traceback" not in err
        assert str(db) in err


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--min-psnr-db", "nan"),
        ("--min-speedup", "nan"),
        ("--min-worst-frame-psnr-db", "NaN"),
        ("--min-psnr-db", "inf"),
        ("--min-speedup", "-1"),
        ("--min-psnr-db", "-0.5"),
    ],
)
def test_a_threshold_that_is_not_a_finite_number_is_refused(store, capsys, flag, value):
    uri, _ = store
    assert main(["--experiment", "ci", "--tracking-uri", uri, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: gate: {flag}=") and "finite number >= 0" in err


def test_a_store_locked_between_check_and_open_is_refused_with_exit_2(store, capsys, monkeypatch):
    """A writer that takes the store's creation lock after the gate checked the store and holds
    it past the timeout: nothing to judge (exit 2, the lock named), not a traceback (exit 1,
    which CI would read as a missed threshold)."""
    import fcntl

    from evalharness.gate import cli
    from evalharness.tracking.store import creation_lock, lock_path

    uri, _ = store
    held = os.open(lock_path(uri), os.O_RDWR | os.O_CREAT)

    def open_while_a_writer_holds_the_lock(u):
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the writer, from another descriptor
        with creation_lock(u, timeout_s=0.2):
            raise AssertionError("the lock should not be free")

    monkeypatch.setattr(cli, "open_client", open_while_a_writer_holds_the_lock)
    try:
        assert main(["--experiment", "ci", "--tracking-uri", uri, "--min-speedup", "1"]) == 2
    finally:
        os.close(held)
    err = capsys.readouterr().err
    assert err.startswith("error: gate: another process has held ") and "Traceback" not in err
    assert str(lock_path(uri)) in err
