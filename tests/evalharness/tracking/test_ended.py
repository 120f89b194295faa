"""A run its process left RUNNING (killed) is closed by the next start: FAILED or KILLED with a
``failure_reason`` tag, its open child runs too; an ended run, a missing store or a missing run
are left alone without an error."""

import pytest
from mlflow.tracking import MlflowClient

from evalharness.tracking import MlflowTracker, NullTracker, mark_run_ended


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ended")
    return f"sqlite:///{folder}/mlflow.db", folder / "mlartifacts"


def _open_run(store) -> MlflowTracker:
    uri, artifacts = store
    return MlflowTracker(uri, "ended", "run", artifact_root=artifacts)


def test_trackers_say_where_their_run_is(store):
    tracker = _open_run(store)
    assert tracker.tracking_uri == store[0] and tracker.run_id
    assert NullTracker().tracking_uri is None and NullTracker().run_id is None


def test_open_run_and_its_open_children_are_marked(store):
    parent = _open_run(store)
    done, left_open = parent.child("pair-0"), parent.child("pair-1")
    done.finish("FINISHED")
    assert mark_run_ended(parent.tracking_uri, parent.run_id, "KILLED", "pid 7 on h gone")
    client = MlflowClient(store[0])
    for tracker, status in ((parent, "KILLED"), (left_open, "KILLED"), (done, "FINISHED")):
        run = client.get_run(tracker.run_id)
        assert run.info.status == status and run.info.end_time
    assert client.get_run(parent.run_id).data.tags["failure_reason"] == "pid 7 on h gone"
    assert "failure_reason" not in client.get_run(done.run_id).data.tags


def test_ended_run_is_left_as_it_ended(store):
    tracker = _open_run(store)
    tracker.finish("FINISHED")
    assert not mark_run_ended(tracker.tracking_uri, tracker.run_id, "FAILED", "late")
    run = MlflowClient(store[0]).get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and "failure_reason" not in run.data.tags


def test_failed_is_recorded_and_a_second_mark_is_a_no_op(store):
    tracker = _open_run(store)
    assert mark_run_ended(tracker.tracking_uri, tracker.run_id, "FAILED", "crashed")
    assert not mark_run_ended(tracker.tracking_uri, tracker.run_id, "KILLED", "again")
    run = MlflowClient(store[0]).get_run(tracker.run_id)
    assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == "crashed"


def test_missing_store_or_run_is_tolerated_and_nothing_created(store, tmp_path):
    missing = tmp_path / "nowhere" / "mlflow.db"
    assert not mark_run_ended(f"sqlite:///{missing}", "0123abcd", "FAILED", "x")
    assert not missing.parent.exists()
    assert not mark_run_ended(store[0], "0123456789abcdef0123456789abcdef", "FAILED", "x")


def test_only_terminal_failure_statuses_are_accepted(store):
    with pytest.raises(ValueError, match="FAILED"):
        mark_run_ended(store[0], "r", "FINISHED", "x")
