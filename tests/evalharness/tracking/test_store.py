"""A new tracking store created once when runs start together: the inter-process lock, and two
processes creating the same new sqlite store at once through the run's own calls."""

import fcntl
import multiprocessing
import tempfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness.tracking.store import (
    creation_lock,
    lock_path,
    looks_like_creation_race,
    sqlite_file,
    store_kind,
)

REPETITIONS = 3
WORKERS = 2


def test_store_kinds():
    assert store_kind("sqlite:////tmp/m.db") == "sqlite"
    assert store_kind("postgresql+psycopg://u:p@h:5432/d") == "postgresql"
    assert store_kind("mysql+pymysql://u:p@h/d") == "database"
    assert store_kind("http://127.0.0.1:5000") == "server"
    assert store_kind("https://mlflow.example.com") == "server"
    assert store_kind("./mlruns") == "other"


def test_lock_sits_beside_a_sqlite_file_and_in_tmp_for_a_database_server(tmp_path):
    assert sqlite_file(f"sqlite:///{tmp_path}/m.db") == tmp_path / "m.db"
    assert sqlite_file("sqlite:///relative/m.db") == Path("relative/m.db")
    assert sqlite_file("sqlite://") is None and sqlite_file("http://h:5000") is None
    assert lock_path(f"sqlite:///{tmp_path}/m.db") == tmp_path / "m.db.lock"
    server_lock = lock_path("postgresql+psycopg://u:secret@h:5432/d")
    assert server_lock.parent == Path(tempfile.gettempdir()) and "secret" not in server_lock.name
    # Not even a hash of the password in a name anyone can list: any password, the same lock.
    assert lock_path("postgresql+psycopg://u:other@h:5432/d") == server_lock
    assert lock_path("http://127.0.0.1:5000") is None  # the server creates its own schema


def test_creation_lock_excludes_another_holder_until_released(tmp_path):
    uri = f"sqlite:///{tmp_path}/sub/m.db"
    with creation_lock(uri):
        # flock conflicts between open file descriptions, so this stands in for a second process.
        with open(tmp_path / "sub" / "m.db.lock") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / "sub" / "m.db.lock") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


def test_schema_creation_races_are_recognised():
    assert looks_like_creation_race(Exception("table experiments already exists"))
    assert looks_like_creation_race(
        Exception("Online migration expected to match one row when updating 'a' to 'b'")
    )
    assert not looks_like_creation_race(Exception("unable to open database file"))


def _open_like_a_run(uri: str, artifacts: str, probe: bool, barrier, results, worker: int):
    """What a run does to a store at its start: the probe (an explicit URI), then the tracker's
    run (the probe is skipped for the default store)."""
    from evalharness.tracking import MlflowTracker, check_tracking

    barrier.wait()
    try:
        if probe:
            check_tracking("mlflow", uri, "race")
        tracker = MlflowTracker(uri, "race", f"run-{worker}", artifact_root=Path(artifacts))
        tracker.finish("FINISHED")
        results.put((worker, "ok"))
    except BaseException as err:  # noqa: BLE001 - reported to the test, which names it
        results.put((worker, f"{type(err).__name__}: {err}"[:800]))


def _race_worker(jobs, barrier, results, worker: int):
    for uri, artifacts, probe in iter(jobs.get, None):
        _open_like_a_run(uri, artifacts, probe, barrier, results, worker)


@pytest.mark.slow  # spawns two Python processes that each create stores (about 30 s)
def test_two_processes_create_a_new_sqlite_store_at_once(tmp_path):
    # spawn, not fork: the test process has imported JAX, which is not fork-safe.
    ctx = multiprocessing.get_context("spawn")
    barrier, jobs, results = ctx.Barrier(WORKERS), ctx.Queue(), ctx.Queue()
    workers = [
        ctx.Process(target=_race_worker, args=(jobs, barrier, results, i)) for i in range(WORKERS)
    ]
    for process in workers:
        process.start()
    try:
        for repetition in range(REPETITIONS):
            uri = f"sqlite:///{tmp_path}/store{repetition}/mlflow.db"
            # Every other repetition skips the probe: the default store is opened by the tracker.
            job = (uri, str(tmp_path / "mlartifacts"), repetition % 2 == 0)
            for _ in workers:
                jobs.put(job)
            outcomes = dict(results.get(timeout=300) for _ in workers)
            assert outcomes == {i: "ok" for i in range(WORKERS)}, f"repetition {repetition}"
            runs = MlflowClient(uri).search_runs(
                [MlflowClient(uri).get_experiment_by_name("race").experiment_id]
            )
            assert sorted(r.info.status for r in runs) == ["FINISHED"] * WORKERS
    finally:
        for _ in workers:
            jobs.put(None)
        for process in workers:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    assert all(p.exitcode == 0 for p in workers)
