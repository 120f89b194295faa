"""The exit-code contract end to end (``evalharness.exit_codes``): the command line as CI runs it,
with signals and faults injected, and the run folder's and MLflow's record of how each run ended."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness import exit_codes
from evalharness.evidence import run_status
from evalharness.exit_codes import RunFailed
from evalharness.run import run
from evalharness.tracking.mlflow_client import default_tracking_uri
from tests.helpers.harness_config import SMALL, small_config
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)


def _command(tmp_path: Path, *overrides: str) -> list[str]:
    out = tmp_path / "outputs"
    return [
        sys.executable,
        "-m",
        "evalharness",
        *SMALL,
        f"output_root={out}",
        "progress=off",
        *overrides,
    ]


def _start(tmp_path: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        _command(tmp_path, *overrides),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(proc: subprocess.Popen, marker: str, timeout: float = 600) -> list[str]:
    """Lines of the process's output up to the first holding ``marker``."""
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return seen
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise AssertionError(f"{marker!r} never appeared:\n{''.join(seen)[-3000:]}")


def _folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "outputs" / "runs").glob("*"))


def _mlflow_statuses(tmp_path: Path) -> list[str]:
    client = MlflowClient(default_tracking_uri(tmp_path / "outputs"))
    exp = client.get_experiment_by_name("evalharness")
    return [r.info.status for r in client.search_runs([exp.experiment_id])]


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGINT, exit_codes.INTERRUPTED, "interrupted (Ctrl-C)"),
        (signal.SIGTERM, exit_codes.TERMINATED, "terminated"),
    ],
)
def test_a_signal_during_the_dense_arm_ends_with_its_code_and_marks_the_run_killed(
    tmp_path, sig, code, said
):
    proc = _start(tmp_path)
    _wait_for(proc, "warm-up run")  # inside an arm: the folder and the MLflow run exist
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == code, rest
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1].startswith("error: ")
    (folder,) = _folders(tmp_path)
    record = run_status.read_status(folder)
    assert record["status"] == "killed" and record["error"] == said
    assert _mlflow_statuses(tmp_path) == ["KILLED"]


# Moments of a run, each named by the line printed just before it: every phase, inside the first
# arm's compile (the line comes right before XLA compiles), its warm-up, the timed rounds,
# decoding and the summary (uploads and the folder's last files).
MOMENTS = [
    "[1/6] preflight",
    "[2/6] build model",
    "[3/6] encode prompts",
    "compiling the",
    "warm-up run",
    "timing",
    "decode and quality",
    "[6/6] summary",
]


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_signal_at_any_moment_ends_with_its_code_and_nothing_swallowed(tmp_path, moment):
    sig = signal.SIGINT if MOMENTS.index(moment) % 2 == 0 else signal.SIGTERM
    code = exit_codes.INTERRUPTED if sig == signal.SIGINT else exit_codes.TERMINATED
    proc = _start(tmp_path)
    _wait_for(proc, moment)
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=600)
    assert proc.returncode == code, rest  # never 139 (a crash) nor 0 (the signal swallowed)
    assert "Traceback" not in rest and "Exception ignored" not in rest
    assert rest.strip().splitlines()[-1].startswith("error: ")
    for folder in _folders(tmp_path):  # none before the build; killed, or done if it finished
        status = run_status.read_status(folder)["status"]
        assert status == "killed" or (moment == MOMENTS[-1] and status == "finished"), status


@pytest.mark.parametrize("phase", ["[1/6] preflight", "[4/6] compile arms"])
def test_ctrl_c_in_another_phase_ends_with_130_and_one_line(tmp_path, phase):
    proc = _start(tmp_path)
    _wait_for(proc, phase)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == exit_codes.INTERRUPTED, rest
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)")
    for folder in _folders(tmp_path):  # none yet in preflight; killed once one exists
        assert run_status.read_status(folder)["status"] == "killed"


def test_a_killed_run_is_recognised_and_closed_by_the_next_start(tmp_path):
    proc = _start(tmp_path)
    _wait_for(proc, "warm-up run")
    proc.kill()  # SIGKILL: no chance to write anything
    proc.wait(timeout=60)
    (stale,) = _folders(tmp_path)
    assert run_status.read_status(stale)["status"] == "running"
    assert _mlflow_statuses(tmp_path) == ["RUNNING"]
    done = subprocess.run(
        _command(tmp_path), cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = run_status.read_status(stale)
    assert record["status"] == "killed" and "ended without finishing" in record["error"]
    assert sorted(_mlflow_statuses(tmp_path)) == ["FINISHED", "KILLED"]
    assert "marked killed" in done.stdout + done.stderr


def test_a_full_disk_during_the_run_fails_it_naming_the_setting(tmp_path, monkeypatch):
    from evalharness.evidence import run_folder

    def full(folder, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "dense.mp4"))

    monkeypatch.setattr(run_folder, "write_arm_videos", full)
    with pytest.raises(RunFailed) as failure:
        run(small_config(tmp_path))
    message = str(failure.value)
    assert message.startswith("the run failed while running: OSError")
    assert "is full: free space or set output_root to a larger disk" in message
    folder = Path(failure.value.run_dir)
    record = json.loads((folder / "status.json").read_text())
    assert record["status"] == "failed" and "No space left" in record["error"]
    assert "Traceback" in (folder / "error.log").read_text()
    assert _mlflow_statuses(tmp_path) == ["FAILED"]


# Each bad input: the exit code and the start of its one error line (no traceback).
BAD_INPUTS = [
    ("model=nope", "error: no model named 'nope'; the choices are tiny, tiny-planted, tiny-random"),
    ("warm_runs=abc", "error: warm_runs='abc' is not a valid value for warm_runs"),
    ("warm_runs=0", "error: steps=2 and warm_runs=0 must both be >= 1"),
    ("guidance_scale=-3", "error: guidance_scale=-3.0 must be a finite number >= 0"),
    ("prompt=", "error: prompt is empty"),
    ("seed=-1", "error: seed -1 is outside"),
    ("warm_run=1", "error: unknown setting 'warm_run'; did you mean warm_runs?"),
    ("+warm_run=1", "did you mean warm_runs for warm_run?"),
    ("kernel.block_q=999999", "error: kernel.block_q=999999 is larger than the 144 tokens"),
    ("model=wan2.1-t2v-1.3b", "model.checkpoint"),
    ("resolution=1440p", "This is an accelerator's run"),
]


@pytest.mark.parametrize(("override", "expected"), BAD_INPUTS)
def test_every_bad_input_is_refused_with_exit_2_and_one_line(tmp_path, override, expected):
    if override == "resolution=1440p":
        command = [sys.executable, "-m", "evalharness", override, f"output_root={tmp_path}/o"]
    else:
        command = _command(tmp_path, override)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == exit_codes.REFUSED, done.stderr[-2000:]
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "outputs" / "runs").exists()  # nothing was started
    assert time.perf_counter() - start < 120
