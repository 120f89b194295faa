"""``status.json`` in every run folder: whether the run is running, finished, failed or killed.

Written (atomically) when the folder is created and when the run ends. A process killed outright
(SIGKILL, a lost machine) cannot write its end; the next run on the same host recognises its
folder by a pid that is gone or reused (another start time), marks it ``killed`` and closes its
MLflow run (:func:`recover_stale_runs`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
ERROR_LOG = "error.log"
RUNNING, FINISHED, FAILED, KILLED = "running", "finished", "failed", "killed"


def _process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux ``/proc``; None without it or the process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19]  # field 22 of stat; the first two (pid, comm) were split off


def _alive(pid: int, started: str | None) -> bool:
    if pid <= 0:  # os.kill(0 or -1, ...) would address a whole process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Another user's process holds the pid: alive, and the run's own when it started when
        # the run's did (two users may share one output root).
        pass
    if started is None:
        return True
    now = _process_start(pid)
    return now is None or now == started


def process_stamp() -> dict[str, Any]:
    """This process as a later one recognises it: its pid, the pid's start time and the host."""
    pid = os.getpid()
    return {"pid": pid, "pid_start": _process_start(pid), "host": socket.gethostname()}


def process_alive(stamp: Mapping[str, Any]) -> bool | None:
    """Whether the process a :func:`process_stamp` names still runs: on this host, its pid is
    there with the same start time; None for a process on another host (not knowable here)."""
    if stamp.get("host") != socket.gethostname():
        return None
    return _alive(int(stamp.get("pid", -1)), stamp.get("pid_start"))


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """The folder's status, or None when it has none (or it cannot be read)."""
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_status(run_dir: Path, status: str, **fields: Any) -> Path:
    """Writes ``status`` and ``fields`` over the folder's earlier status (keeping what the start
    recorded), through a temporary file renamed over the old one."""
    path = Path(run_dir) / STATUS_FILE
    record = {**(read_status(run_dir) or {}), **fields, "status": status}
    record[f"{status}_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    tmp = path.with_name(f".{STATUS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def start_status(run_dir: Path, *, mlflow_run_id: str | None, tracking_uri: str | None) -> Path:
    """``running``, with what the next run needs to recognise this one if it is killed: pid,
    its start time, host, and the MLflow run."""
    return write_status(
        run_dir, RUNNING, **process_stamp(), mlflow_run_id=mlflow_run_id, tracking_uri=tracking_uri
    )


def end_status(
    run_dir: Path, status: str, error: str | None = None, details: str = "", **fields: Any
) -> Path:
    """The run's end (``finished``, ``failed``, or ``killed`` on Ctrl-C or SIGTERM) with
    ``fields``; ``error`` is one line, ``details`` (a traceback) go to ``error.log`` beside it."""
    if error is not None:
        fields["error"] = error
    if details:
        (Path(run_dir) / ERROR_LOG).write_text(details)
        fields["error_log"] = ERROR_LOG
    return write_status(run_dir, status, **fields)


def stale_runs(output_root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Run folders under ``output_root/runs`` that say ``running`` on this host while their
    process is gone: killed without a chance to say so."""
    runs = Path(output_root) / "runs"
    if not runs.is_dir():
        return
    host = socket.gethostname()
    for status_file in sorted(runs.glob(f"*/{STATUS_FILE}")):
        record = read_status(status_file.parent)
        if not record or record.get("status") != RUNNING or record.get("host") != host:
            continue
        if not _alive(int(record.get("pid", -1)), record.get("pid_start")):
            yield status_file.parent, record


def recover_stale_runs(
    output_root: Path, close_tracked_run: Callable[[str, str, str, str], Any]
) -> list[Path]:
    """Marks the folders of :func:`stale_runs` ``killed`` and closes their MLflow runs.

    Args:
        output_root: the runs' root.
        close_tracked_run: ``(tracking_uri, run_id, status, reason)``, e.g.
            ``evalharness.tracking.mark_run_ended``.

    Returns:
        The folders marked.
    """
    found = []
    for folder, record in stale_runs(output_root):
        reason = (
            f"process {record.get('pid')} on {record.get('host')} ended without finishing "
            f"(found by process {os.getpid()})"
        )
        end_status(folder, KILLED, error=reason)
        run_id, uri = record.get("mlflow_run_id"), record.get("tracking_uri")
        if run_id and uri:
            close_tracked_run(uri, run_id, "KILLED", reason)
        log.warning(
            "run folder %s was left running by a process that is gone: marked killed", folder
        )
        found.append(folder)
    return found
