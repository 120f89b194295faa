"""``python -m reports`` refuses flags it cannot use with exit 2 and one ``error:`` line, before
it reads a run or writes a file: ``--max-runs`` below 1, an ``--out`` that is a file, a
``--plan-run`` that is not one of the report's harness runs, a deleted ``--run-id``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow import MlflowClient

from evalharness.tracking.mlflow_client import MlflowTracker, default_tracking_uri
from reports.cli import main as reports_main
from tests.helpers.paths import REPO_ROOT


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with one finished harness run (tagged as the harness tags it) and a deleted one."""
    uri = default_tracking_uri(tmp_path_factory.mktemp("report-store"))
    ids = []
    for _ in range(2):
        tracker = MlflowTracker(uri, "evalharness", "tiny-cpu-balanced")
        tracker.set_tags({"run_kind": "harness", "schedule": "balanced", "resolution": "cpu"})
        tracker.log_metrics({"speedup": 1.1, "psnr_db": 30.0})
        tracker.finish("FINISHED")
        ids.append(tracker.run_id)
    MlflowClient(uri).delete_run(ids[1])
    return uri, ids[0], ids[1]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: reports: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("count", ["0", "-3"])
def test_max_runs_below_one_is_refused(store, tmp_path, capsys, count):
    uri, _, _ = store
    out = tmp_path / "report"
    code = reports_main(["--tracking-uri", uri, "--max-runs", count, "--out", str(out), "--no-log"])
    assert code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"--max-runs {count}" in line and ">= 1" in line
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused(store, tmp_path, capsys):
    uri, _, _ = store
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    for out in (afile, afile / "report"):
        assert reports_main(["--tracking-uri", uri, "--out", str(out), "--no-log"]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"--out {out}" in line and "is a file, not a folder" in line
    assert afile.read_text() == "mine"


def test_a_plan_run_that_is_not_a_harness_run_of_the_report_is_refused(store, tmp_path, capsys):
    uri, harness, _ = store
    out = tmp_path / "report"
    code = reports_main(
        ["--tracking-uri", uri, "--plan-run", "nosuchrun", "--out", str(out), "--no-log"]
    )
    assert code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--plan-run nosuchrun" in line and harness in line  # the fix: a real id
    assert not out.exists()  # refused before anything was written


def test_a_deleted_run_id_is_refused(store, tmp_path, capsys):
    uri, _, deleted = store
    out = tmp_path / "report"
    assert reports_main(["--tracking-uri", uri, "--run-id", deleted, "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"run {deleted} is deleted" in line and "mlflow runs restore" in line
    assert not out.exists()


def test_a_failure_nobody_foresaw_exits_4_with_an_error_line_not_1(tmp_path):
    # A bug planted in the command's main: its traceback stays, and the code is 4, never 1.
    code = (
        "import sys, reports.cli as cli\n"
        "def broken(argv=None): raise RuntimeError('planted bug')\n"
        "cli.main = broken\n"
        "sys.argv = ['reports']\n"
        "import runpy; runpy.run_module('reports', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: reports: ")
