"""status.json: a run folder says how its run ended, and a dead run's folder is recognised."""

import os
import subprocess
import sys

from evalharness.evidence import run_status


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_start_then_end_keeps_what_the_start_recorded(tmp_path):
    run_status.start_status(tmp_path, mlflow_run_id="abc", tracking_uri="sqlite:///x.db")
    record = run_status.read_status(tmp_path)
    assert record["status"] == "running" and record["pid"] == os.getpid()
    run_status.end_status(tmp_path, "failed", error="OSError: full", details="Traceback ...")
    record = run_status.read_status(tmp_path)
    assert record["status"] == "failed" and record["mlflow_run_id"] == "abc"
    assert record["error"] == "OSError: full" and "failed_at" in record
    assert (tmp_path / "error.log").read_text() == "Traceback ..."
    assert not list(tmp_path.glob(".status.json.*"))  # the temporary file was renamed


def _folder(root, name, **fields):
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    run_status.start_status(folder, mlflow_run_id=f"id-{name}", tracking_uri="uri")
    if fields:
        run_status.write_status(folder, fields.pop("status", "running"), **fields)
    return folder


def test_only_running_folders_of_dead_processes_on_this_host_are_stale(tmp_path):
    dead = _folder(tmp_path, "dead", pid=_dead_pid())
    _folder(tmp_path, "alive")  # this process
    _folder(tmp_path, "elsewhere", pid=_dead_pid(), host="another-host")
    _folder(tmp_path, "done", pid=_dead_pid(), status="finished")
    reused = _folder(tmp_path, "reused", pid_start="1")  # our pid, another start: pid reused
    stale = [folder for folder, _ in run_status.stale_runs(tmp_path)]
    assert stale == [dead, reused]
    closed = []
    marked = run_status.recover_stale_runs(tmp_path, lambda *a: closed.append(a))
    assert marked == [dead, reused]
    assert [c[1:3] for c in closed] == [("id-dead", "KILLED"), ("id-reused", "KILLED")]
    assert run_status.read_status(dead)["status"] == "killed"
    assert "ended without finishing" in run_status.read_status(dead)["error"]
    assert list(run_status.stale_runs(tmp_path)) == []  # marked once


def test_no_runs_folder_means_nothing_stale(tmp_path):
    assert list(run_status.stale_runs(tmp_path / "missing")) == []


def test_another_users_live_process_is_not_stale(tmp_path, monkeypatch):
    """os.kill(pid, 0) on another user's process raises PermissionError: it is alive, and the
    run's own while its start time matches (two users may share an output root)."""

    def refused(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    own = _folder(tmp_path, "own")  # this process's pid and start time
    reused = _folder(tmp_path, "reused", pid_start="1")
    monkeypatch.setattr(run_status.os, "kill", refused)
    assert [folder for folder, _ in run_status.stale_runs(tmp_path)] == [reused]
    assert own.exists()
