"""Multi-host JAX: two processes on localhost (CPU collectives) run one comparison together.

The processes join through the launcher environment (``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``) before any other JAX call; process 0 writes the one
run folder and the one MLflow run; latents equal a single process's run on as many devices.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from evalharness.tracking import multihost
from evalharness.tracking.mlflow_client import default_tracking_uri
from kernels.parallel.mesh import detect_cluster, initialize_distributed
from tests.helpers.harness_config import SMALL
from tests.helpers.paths import REPO_ROOT

_LIMIT_S = 600  # a hung collective must fail the test, not the CI job


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(commands: list[list[str]], env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """Starts one process per command with the launcher environment; waits for all of them."""
    port = _free_port()
    procs = []
    for index, cmd in enumerate(commands):
        launcher = {
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": str(len(commands)),
            "JAX_PROCESS_ID": str(index),
        }
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=REPO_ROOT,
                env={**env, **launcher},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=_LIMIT_S)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
    return done


def _env(tmp_path: Path) -> dict[str, str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COORD", "JAX_NUM_P"))}
    env.pop("JAX_PROCESS_ID", None)
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    return {**env, "JAX_PLATFORMS": "cpu", "TMPDIR": str(scratch)}


def test_detect_cluster_reads_launchers_slurm_steps_and_tpu_pods():
    assert detect_cluster({}) is None
    assert "JAX_COORDINATOR_ADDRESS" in detect_cluster({"JAX_COORDINATOR_ADDRESS": "h:1"})
    assert detect_cluster({"SLURM_STEP_NUM_TASKS": "4"}) == "a Slurm step of 4 tasks"
    # One task (e.g. one job of a submitit sweep) or a batch script outside ``srun``: one process.
    assert detect_cluster({"SLURM_STEP_NUM_TASKS": "1", "SLURM_JOB_ID": "7"}) is None
    assert detect_cluster({"SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}) is None
    assert detect_cluster({"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3"}) == "a TPU pod slice of 4 hosts"
    assert detect_cluster({"TPU_WORKER_HOSTNAMES": "localhost"}) is None
    # Nothing detected: a plain run does not join; forcing it off wins over a detection.
    assert initialize_distributed(env={"SLURM_STEP_NUM_TASKS": "1"}) is False
    assert initialize_distributed(False, env={"TPU_WORKER_HOSTNAMES": "a,b"}) is False


def test_joining_after_jax_started_names_the_fix():
    import jax

    jax.devices()  # the backend is up: JAX refuses to join now, before connecting anywhere
    env = {
        "JAX_COORDINATOR_ADDRESS": "127.0.0.1:1",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "0",
    }
    with pytest.raises(RuntimeError, match="call kernels.parallel.mesh.initialize_distributed"):
        initialize_distributed(env=env)


def test_one_process_is_its_own_primary_and_every_collective_is_local():
    assert multihost.is_primary()
    assert multihost.everywhere(True) and not multihost.everywhere(False)
    assert multihost.from_primary(False) is False
    np.testing.assert_array_equal(multihost.to_host(np.arange(3)), [0, 1, 2])
    multihost.same_config({"seed": "0"}, _never_asked)  # nothing to disagree with


def _never_asked() -> str:
    raise AssertionError("one process hashed its code: nothing needs comparing")


@pytest.mark.parametrize(
    "other, mismatch",
    [
        (("1",), None),
        (("2",), "process 1 in seed"),
        # The slowest of the three: about 3 s on 2 cores.
        pytest.param(("1", "other"), "code and jax version", marks=pytest.mark.slow),
    ],
    ids=["same", "other seed", "other code"],
)
def test_two_processes_gather_agree_and_refuse_a_mismatched_config(tmp_path, other, mismatch):
    cmd = [sys.executable, "-m", "tests.helpers.multihost_worker"]
    results = _launch([[*cmd, "1"], [*cmd, *other]], _env(tmp_path))
    reports = []
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
        reports.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert [r["process"] for r in reports] == [0, 1]
    assert [r["primary"] for r in reports] == [True, False]
    for report in reports:
        assert report["joined"]
        assert report["gathered"] == [0.0, 1.0, 2.0, 3.0]  # each process held half
        assert report["everywhere_mixed"] is False and report["everywhere_all"] is True
        assert report["from_primary"] is True  # process 0's True, process 1's False
        if mismatch:  # both processes refuse, naming the section that differs
            assert mismatch in report["mismatch"]
        else:
            assert report["mismatch"] is None


def _harness(*overrides: str) -> list[str]:
    return [sys.executable, "-m", "evalharness", *SMALL, "progress=off", *overrides]


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_two_process_run_matches_a_single_process_run_on_as_many_devices(tmp_path):
    env = _env(tmp_path)
    single = subprocess.run(
        _harness(
            f"output_root={tmp_path}/single/o",
            f"cache_dir={tmp_path}/single/c",
            "parallel.sequence=2",
            "save_latents=true",
            "noise_floor=false",
            "logger=none",
        ),
        cwd=REPO_ROOT,
        env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
        capture_output=True,
        text=True,
        timeout=_LIMIT_S,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    shared = _harness(
        f"output_root={tmp_path}/multi/o",
        f"cache_dir={tmp_path}/multi/c",
        "save_latents=true",
        "noise_floor=false",
    )
    first, second = _launch([shared, shared], env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert "multi-process run: process 1 of 2, 1 local of 2 devices" in second.stdout
    # Only process 0 reports and writes: one run folder, one MLflow run, its videos.
    assert "run folder:" in first.stdout and "run folder:" not in second.stdout
    (run_dir,) = (tmp_path / "multi" / "o" / "runs").iterdir()
    assert (run_dir / "sparse.mp4").is_file() and (run_dir / "report.md").is_file()
    assert not list((tmp_path / "tmp").glob("evalharness-process*"))  # scratch removed
    (single_dir,) = (tmp_path / "single" / "o" / "runs").iterdir()
    with np.load(run_dir / "latents.npz") as multi, np.load(single_dir / "latents.npz") as one:
        assert sorted(multi.files) == ["dense", "sparse"]
        for arm in multi.files:
            scale = float(np.max(np.abs(one[arm])))
            np.testing.assert_allclose(multi[arm], one[arm], rtol=1e-5, atol=1e-5 * scale)
    client = MlflowClient(default_tracking_uri(tmp_path / "multi" / "o"))
    experiment = client.get_experiment_by_name("evalharness")
    (stored,) = client.search_runs([experiment.experiment_id])
    # No threshold was set: the run is "not gated", never "passed".
    assert stored.info.status == "FINISHED" and stored.data.tags["gate"] == "not gated"
    assert stored.data.params["mesh_processes"] == "2"
    assert stored.data.params["mesh_devices"] == "2"
    assert stored.data.tags["run_dir"] == str(run_dir.resolve())
    assert "latents.npz" in {a.path for a in client.list_artifacts(stored.info.run_id)}
    # Both processes computed the same dense arms: one cache entry survives (first writer wins).
    assert len(list((tmp_path / "multi" / "c" / "dense_arms").iterdir())) == 1


@pytest.mark.slow  # several harness processes: about 6 s on 2 cores
def test_processes_started_with_different_configs_refuse_together(tmp_path):
    out = tmp_path / "o"
    common = (f"output_root={out}", f"cache_dir={tmp_path}/c")
    results = _launch([_harness(*common, "seed=0"), _harness(*common, "seed=1")], _env(tmp_path))
    for result in results:
        assert result.returncode == 2, result.stderr[-3000:]
        assert "mismatched configs" in result.stderr and "process 1 in seed" in result.stderr
        assert "Traceback" not in result.stderr
    assert not out.exists()  # refused before any folder or MLflow store


@pytest.mark.slow
def test_a_refusal_on_process_zero_stops_every_process(tmp_path):
    # Only process 0 logs, so only it probes the tracking server; the other must not go on alone.
    out = tmp_path / "o"
    bad = (
        f"output_root={out}",
        f"cache_dir={tmp_path}/c",
        f"logger.tracking_uri=http://127.0.0.1:{_free_port()}",
    )
    first, second = _launch([_harness(*bad), _harness(*bad)], _env(tmp_path))
    assert first.returncode == 2 and second.returncode == 2, second.stderr[-3000:]
    assert "tracking store http://127.0.0.1:" in first.stderr and "cannot be used" in first.stderr
    assert "refused by another process of this multi-host run" in second.stderr
    assert not out.exists()
