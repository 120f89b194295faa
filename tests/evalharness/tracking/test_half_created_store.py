"""A new sqlite store is created whole or not at all (its tables made in a file beside it,
renamed into place), and a store left broken without a run in it (half-created by an older
process, or by another MLflow version) is refused naming the file to delete; the run folder of
a process killed while creating it is marked ``killed`` by the refused run."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3

import pytest
from mlflow.tracking import MlflowClient

import evalharness.run as run_module
from evalharness.evidence import run_status
from evalharness.tracking import TrackingUnavailable, check_tracking, open_client
from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri
from evalharness.tracking.store import holds_no_runs
from tests.helpers.harness_config import small_config

# A revision from before MLflow's newest migrations: the store's tables and its recorded
# schema disagree, as after a process killed during the migrations.
OLD_REVISION = "1b5f0d9ad7c1"


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Two broken stores made once (MLflow takes seconds to create one): ``empty`` and
    ``with_run``, each with its schema's recorded version set back. They are made under other
    paths than the tests open (MLflow keeps the store of a URI it opened in this process)."""
    made = {}
    for name in ("empty", "with_run"):
        folder = tmp_path_factory.mktemp(f"template-{name}")
        uri = default_tracking_uri(folder)
        if name == "with_run":
            MlflowTracker(uri, "evalharness", "kept").finish("FINISHED")
        else:
            open_client(uri).search_experiments(max_results=1)
        with sqlite3.connect(folder / "mlflow.db") as db:
            db.execute("UPDATE alembic_version SET version_num = ?", (OLD_REVISION,))
        made[name] = folder / "mlflow.db"
    return made


def _broken_store(output_root, template):
    """A copy of ``template`` as the default store under ``output_root``."""
    output_root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, output_root / "mlflow.db")
    return output_root / "mlflow.db"


def test_a_broken_store_without_runs_is_refused_naming_the_file_to_delete(tmp_path, templates):
    database = _broken_store(tmp_path / "o", templates["empty"])
    assert holds_no_runs(database)
    with pytest.raises(TrackingUnavailable) as refused:
        check_tracking("mlflow", None, "evalharness", tmp_path / "o")
    message = str(refused.value)
    assert f"Fix: delete {database} (no run is lost)" in message
    assert "half-created" in message and "\n" not in message


def test_a_broken_store_that_holds_runs_is_never_called_deletable(tmp_path, templates):
    database = _broken_store(tmp_path / "o", templates["with_run"])
    assert not holds_no_runs(database)
    with pytest.raises(TrackingUnavailable) as refused:
        check_tracking("mlflow", None, "evalharness", tmp_path / "o")
    assert "delete" not in str(refused.value)


@pytest.mark.slow  # MLflow creates a store's tables in about 10 s on a loaded 2-core machine
def test_a_creation_that_stops_part_way_leaves_no_store(tmp_path, monkeypatch):
    uri = default_tracking_uri(tmp_path)

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt  # stands in for a signal during MLflow's table creation

    monkeypatch.setattr(MlflowClient, "search_experiments", killed)
    with pytest.raises(KeyboardInterrupt):
        open_client(uri)
    assert not (tmp_path / "mlflow.db").exists()
    assert not list(tmp_path.glob(".mlflow.db.creating-*"))
    monkeypatch.undo()
    # A SIGKILL leaves its work file: the next creation removes it and makes the store.
    (tmp_path / ".mlflow.db.creating-leftover").write_bytes(b"half")
    open_client(uri).search_experiments(max_results=1)
    assert (tmp_path / "mlflow.db").is_file() and holds_no_runs(tmp_path / "mlflow.db")
    assert not list(tmp_path.glob(".mlflow.db.creating-*"))


def test_the_refused_run_marks_the_folder_of_a_run_killed_there(tmp_path, templates):
    cfg = small_config(tmp_path, "logger=mlflow")
    output_root = tmp_path / "outputs"
    _broken_store(output_root, templates["empty"])
    killed = output_root / "runs" / "20260101-000000-killed"
    killed.mkdir(parents=True)
    # A process that is gone (pid 2**22 + 1 is above Linux's pid limit).
    run_status.write_status(
        killed, run_status.RUNNING, pid=2**22 + 1, host=socket.gethostname(), pid_start=0
    )
    with pytest.raises(TrackingUnavailable, match="Fix: delete"):
        run_module.run(cfg)
    assert run_status.read_status(killed)["status"] == run_status.KILLED
    assert sorted(os.listdir(output_root / "runs")) == [killed.name]  # no folder of its own
