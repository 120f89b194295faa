"""End-to-end harness runs on the tiny model at a toy size: artifacts, cache, failures, gate."""

import json
import os
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException
from mlflow.tracking import MlflowClient

from evalharness.run import GateFailed, run
from evalharness.tracking import default_tracking_uri
from tests.helpers.harness_config import SMALL, small_config


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    metrics = run(small_config(tmp))
    return tmp, metrics


def test_run_writes_videos_metrics_and_mlflow_run(first_run):
    tmp, metrics = first_run
    run_dir = tmp / "outputs" / "runs"
    (folder,) = list(run_dir.iterdir())
    for name in (
        "dense.mp4",
        "sparse.mp4",
        "side_by_side.mp4",
        "noise_floor.mp4",
        "metrics.json",
        "config.yaml",
        "report.md",
        "psnr_per_frame.png",
        "routing_stats.npz",
        "routing_heatmap.png",
    ):
        assert (folder / name).is_file(), name
    stored = json.loads((folder / "metrics.json").read_text())
    assert stored["dense_cache"] == "miss"
    for key in (
        "dense_median_s",
        "sparse_median_s",
        "speedup",
        "ssim_frames",
        "schedule_kept_fraction",
    ):
        assert isinstance(stored[key], float), key
    assert stored["speedup"] == pytest.approx(stored["dense_median_s"] / stored["sparse_median_s"])
    assert "noise_floor_psnr_db" in stored
    client = MlflowClient(default_tracking_uri(tmp / "outputs"))
    mlrun = client.get_run(metrics["mlflow_run_id"])
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.params["schedule.name"] == "balanced"
    assert mlrun.data.tags["device_platform"] == "cpu"
    assert mlrun.data.metrics["speedup"] == pytest.approx(metrics["speedup"])
    names = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {"dense.mp4", "sparse.mp4", "report.md"} <= names


def test_dense_cache_hit_then_invalidation(first_run):
    tmp, metrics = first_run
    again = run(small_config(tmp, "schedule=aggressive"))
    assert again["dense_cache"] == "hit"
    assert again["dense_median_s"] == metrics["dense_median_s"]  # the cached timings, reused
    changed = run(small_config(tmp, "seed=7", "noise_floor=false", "logger=none"))
    assert changed["dense_cache"] == "miss"


def test_gate_failure_raises_after_the_run_is_recorded(first_run):
    tmp, _ = first_run
    with pytest.raises(GateFailed, match="speedup") as info:
        run(small_config(tmp, "gate.min_speedup=1000", "logger=none"))
    assert (tmp / "outputs" / "runs").exists()
    assert info.value.metrics["gate_passed"] is False


def test_failed_run_is_marked_failed_and_keeps_the_dense_arm(first_run, monkeypatch):
    tmp, _ = first_run
    import evalharness.run as run_module

    def broken(*args, **kwargs):
        raise OSError("disk full while writing the video")

    monkeypatch.setattr(run_module, "encode_mp4", broken)
    with pytest.raises(OSError, match="disk full"):
        run(small_config(tmp, "schedule=conservative"))
    client = MlflowClient(default_tracking_uri(tmp / "outputs"))
    exp = client.get_experiment_by_name("evalharness")
    (latest,) = client.search_runs(
        [exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
    )
    assert latest.info.status == "FAILED"
    assert "disk full" in latest.data.tags["error"]
    assert any((tmp / "cache").iterdir())  # the dense arm computed earlier is still cached


def test_invalid_geometry_fails_before_work(tmp_path):
    with pytest.raises(ValueError, match="1088"):
        run(small_config(tmp_path, "resolution.height=1080", "resolution.width=1920"))
    assert not (tmp_path / "outputs").exists()


def test_cli_exit_code_on_a_missed_gate(tmp_path):
    # The pass path (exit 0) is the multirun test below; this is the failing gate.
    cmd = [
        sys.executable,
        "-m",
        "evalharness",
        *SMALL,
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        "logger=none",
        "noise_floor=false",
        "gate.min_speedup=1000",
    ]
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 1, bad.stderr[-2000:]
    assert "speedup" in bad.stderr and "below the threshold 1000" in bad.stderr


def test_unknown_group_option_and_misspelt_keys_fail_before_work(tmp_path):
    with pytest.raises(ConfigCompositionException, match="aggressive"):  # Hydra lists the options
        small_config(tmp_path, "schedule=agressive")
    for typo in ("stepz=3", "schedule.densty=0.3"):
        with pytest.raises(ConfigCompositionException):
            small_config(tmp_path, typo)
    with pytest.raises(ValueError, match="stepz"):  # "+key" appends; run() still refuses it
        run(small_config(tmp_path, "+stepz=3"))
    assert not (tmp_path / "outputs").exists()


def test_multirun_reuses_one_dense_arm_and_prints_table(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "evalharness",
        "-m",
        "schedule=conservative,balanced,aggressive",
        *SMALL,
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        "logger=none",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Multirun summary (3 jobs)" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["conservative", "balanced", "aggressive"]
    assert [r.split("|")[-2].strip() for r in rows] == ["miss", "hit", "hit"]
    assert len(list((tmp_path / "c" / "dense_arms").iterdir())) == 1


def test_sequence_parallel_run_on_eight_forced_cpu_devices_logs_the_mesh(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    cmd = [
        sys.executable,
        "-m",
        "evalharness",
        *SMALL,
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        "noise_floor=false",
        "parallel.sequence=8",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    client = MlflowClient(default_tracking_uri(tmp_path / "o"))
    (stored,) = client.search_runs([client.get_experiment_by_name("evalharness").experiment_id])
    assert stored.data.params["mesh_axes"] == "seq=8"
    assert stored.data.params["mesh_devices"] == "8"
    assert stored.data.metrics["speedup"] > 0
