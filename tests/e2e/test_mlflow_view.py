"""The MLflow experiment page as a user first sees it: a fresh Chromium profile opens the link a
run's description prints, and finds the runs table with the headline metric columns."""

import subprocess
from pathlib import Path

import pytest

from evalharness.tracking import MlflowTracker, experiment_link
from tests.helpers.mlflow_server import mlflow_server

pytestmark = pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is absent: install Debian's chromium (apt-get install -y chromium; "
    ".ci/run does) to render MLflow's page",
)
def test_the_printed_link_opens_the_runs_table_with_the_headline_columns(tmp_path):
    with mlflow_server(tmp_path / "server") as url:
        tracker = MlflowTracker(url, "evalharness", "tiny-cpu-aggressive-ab12cd34")
        tracker.set_tags({"run_kind": "harness", "gate": "failed", "schedule": "aggressive"})
        tracker.log_metrics(
            {"speedup": 1.57, "psnr_db": 31.7, "psnr_worst_frame_db": 23.75, "ssim_frames": 0.99}
        )
        tracker.finish("FINISHED")
        bench = MlflowTracker(url, "evalharness", "bench-kernel-table")
        bench.set_tags({"run_kind": "benchmark"})
        bench.finish("FINISHED")
        link = experiment_link(url, tracker.experiment_id)
        dom = _fresh_profile_dom(link, tmp_path / "fresh-profile")
        charts = _fresh_profile_dom(
            experiment_link(url, tracker.experiment_id, charts=True), tmp_path / "fresh-charts"
        )
    assert "tiny-cpu-aggressive-ab12cd34" in dom  # the run, by its schedule-bearing name
    assert "bench-kernel-table" not in dom  # harness runs only
    for column in ("speedup", "psnr_db", "psnr_worst_frame_db"):
        assert f">{column}<" in dom or f'"{column}"' in dom, column
    assert "Detect Issues" not in dom  # not the GenAI overview a fresh profile opens by default
    # The chart link: the same view in chart mode, its first section the PSNR-vs-speedup scatters.
    assert "Quality vs speed" in charts and "tiny-cpu-aggressive-ab12cd34" in charts
    assert charts.index("Quality vs speed") < charts.index("Model metrics")


def _fresh_profile_dom(link: str, profile: Path) -> str:
    """The page's DOM after a fresh headless Chromium profile opened ``link``."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    command += [f"--user-data-dir={profile}", "--window-size=1400,1000"]
    command += ["--virtual-time-budget=20000", "--dump-dom", link]
    return subprocess.run(command, capture_output=True, text=True, timeout=180).stdout
