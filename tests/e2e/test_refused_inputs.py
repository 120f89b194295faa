"""Bad inputs refused as CI runs the commands: exit 2, one ``error:`` line naming the value and
the fix, no traceback, and nothing computed or written (no run folder, no MLflow run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from evalharness import exit_codes
from evalharness.tracking.mlflow_client import default_tracking_uri
from models.shipped_weights import shipped_checkpoint
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)


def _break_tokenizer(folder: Path) -> None:
    (folder / "tokenizer" / "tokenizer.json").write_text("{not json")


def _heads_as_a_word(folder: Path) -> None:
    path = folder / "transformer" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_attention_heads": "four"}))


def _not_utf8(folder: Path) -> None:
    (folder / "transformer" / "config.json").write_bytes(b'\xff\xfe{"a": 1}')


def _refused(command: list[str]) -> str:
    """The command's one error line, after checking it exited 2 without a traceback."""
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == exit_codes.REFUSED, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    return done.stderr[done.stderr.index("error: ") :]


@pytest.mark.parametrize(
    ("breaking", "expected"),
    [
        (_break_tokenizer, "tokenizer.json is not a readable tokenizer.json"),
        (_heads_as_a_word, "num_attention_heads='four' has type str; it must be an integer"),
        (_not_utf8, "config.json is not UTF-8 text"),
        (None, "model.checkpoint='' names no checkpoint"),
        ("deleted", "is deleted (id 1)"),
        ("/proc/nope", "hydra.run.dir=/proc/nope cannot be written"),
    ],
    ids=["tokenizer", "word-for-int", "non-utf8", "empty-checkpoint", "deleted-exp", "run-dir"],
)
def test_the_main_job_refuses_before_any_work(tmp_path, breaking, expected):
    out = tmp_path / "o"
    command = [sys.executable, "-m", "evalharness", f"output_root={out}"]
    command += [f"cache_dir={tmp_path / 'c'}", "steps=2", "warm_runs=1"]
    if callable(breaking):
        folder = tmp_path / "checkpoint"
        shutil.copytree(shipped_checkpoint("tiny"), folder)
        breaking(folder)
        command.append(f"model.checkpoint={folder}")
    elif breaking is None:
        command.append("model.checkpoint=''")
    elif breaking == "deleted":
        client = MlflowClient(default_tracking_uri(out))
        client.delete_experiment(client.create_experiment("gone"))
        command.append("logger.experiment_name=gone")
    else:
        command.append(f"hydra.run.dir={breaking}")
    assert expected in _refused(command)
    assert not (out / "runs").exists()
    if breaking == "deleted":
        client = MlflowClient(default_tracking_uri(out))
        assert client.search_runs(["1"], run_view_type=ViewType.ALL) == []


def test_the_gate_and_the_report_refuse_as_commands(tmp_path):
    out = tmp_path / "o"
    client = MlflowClient(default_tracking_uri(out))
    run = client.create_run(client.create_experiment("ci"), tags={"run_kind": "harness"})
    client.set_terminated(run.info.run_id)
    client.delete_run(run.info.run_id)
    gate = [sys.executable, "-m", "evalharness.gate", "--output-root", str(out)]
    line = _refused([*gate, "--run-id", run.info.run_id, "--min-speedup", "1"])
    assert "is deleted, so there is nothing to judge" in line
    reports = [sys.executable, "-m", "reports", "--output-root", str(out), "--no-log"]
    assert "--max-runs 0 reads no run" in _refused([*reports, "--max-runs", "0"])
    afile = tmp_path / "afile"
    afile.write_text("")
    assert "is a file, not a folder" in _refused([*reports, "--out", str(afile)])
    server = [sys.executable, "-m", "evalharness.tracking.server", "add-user", "eve:admin"]
    line = _refused([*server, "--tracking-uri", "http://127.0.0.1:9"])
    assert "user name 'eve:admin' could never sign in" in line
