"""Integration: a real ``mlflow server`` on 127.0.0.1 receives a comparison; read it back."""

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalharness.run import run
from tests.helpers.harness_config import small_config
from tests.helpers.mlflow_server import mlflow_server


@pytest.fixture
def server(tmp_path):
    with mlflow_server(tmp_path) as url:
        yield url


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_comparison_logged_to_a_real_server(server, tmp_path):
    cfg = small_config(
        tmp_path, f"logger.tracking_uri={server}", "logger.experiment_name=server-test"
    )
    metrics = run(cfg)
    client = MlflowClient(tracking_uri=server)
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
