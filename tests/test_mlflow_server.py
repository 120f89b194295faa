"""Integration: a real ``mlflow server`` on 127.0.0.1 receives a comparison; read it back."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness.run import run
from tests.helpers.harness_config import small_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the server spawns workers: stop the whole group afterwards
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("mlflow server did not answer /health within 90 s")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_comparison_logged_to_a_real_server(mlflow_server, tmp_path):
    cfg = small_config(
        tmp_path, f"logger.tracking_uri={mlflow_server}", "logger.experiment_name=server-test"
    )
    metrics = run(cfg)
    client = MlflowClient(tracking_uri=mlflow_server)
    stored = client.get_run(metrics["mlflow_run_id"])
    assert stored.info.status == "FINISHED"
    for key in ("dense_median_s", "sparse_median_s", "speedup", "psnr_ffmpeg_db", "ssim_frames"):
        assert stored.data.metrics[key] == pytest.approx(metrics[key]), key
    history = client.get_metric_history(stored.info.run_id, "psnr_frame_db")
    assert len(history) == 33  # one point per frame
    artifacts = {a.path for a in client.list_artifacts(stored.info.run_id)}
    assert {"dense.mp4", "sparse.mp4", "side_by_side.mp4", "metrics.json", "report.md"} <= artifacts
    local = client.download_artifacts(stored.info.run_id, "report.md", str(tmp_path / "dl"))
    assert "Speedup" in Path(local).read_text()
