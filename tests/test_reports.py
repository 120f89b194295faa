"""Cross-run report built from MLflow runs the harness logged."""

from evalharness.tracking import MlflowTracker, default_tracking_uri
from reports.runs_table import main


def test_report_table_and_plot_from_stored_runs(tmp_path, capsys):
    uri = default_tracking_uri(tmp_path)
    for name, speedup, psnr in (("balanced", 1.3, 28.0), ("aggressive", 1.6, float("inf"))):
        tracker = MlflowTracker(uri, "exp", f"run-{name}")
        tracker.log_params({"schedule.name": name, "resolution.name": "cpu"})
        tracker.log_metrics({"speedup": speedup, "psnr_db": psnr, "noise_floor_psnr_db": 40.0})
        tracker.finish("FINISHED")
    assert main(["--experiment", "exp", "--tracking-uri", uri, "--out", str(tmp_path / "r")]) == 0
    table = (tmp_path / "r" / "runs.md").read_text()
    assert "| run-aggressive | - | cpu | aggressive |" in table and "1.60x" in table
    assert "28.00" in table and "inf" in table
    assert (tmp_path / "r" / "quality_vs_speed.png").stat().st_size > 1000
    assert "runs.md" in capsys.readouterr().out
