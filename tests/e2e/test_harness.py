"""End-to-end harness runs on the tiny model at a toy size: artifacts, cache, failures, gate."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from mlflow.tracking import MlflowClient

from evalharness.exit_codes import RunFailed
from evalharness.phases import Phase
from evalharness.run import GateFailed, run
from evalharness.tracking.mlflow_client import default_tracking_uri
from tests.helpers.harness_config import SMALL, small_config


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    metrics = run(small_config(tmp))
    return tmp, metrics


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
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
    # The headline is against the faster dense control; the kernel effect against our dense
    # control (xla_flash on a CPU).
    fastest = min(stored["dense_median_s"], stored["noise_floor_median_s"])
    assert stored["speedup"] == pytest.approx(fastest / stored["sparse_median_s"])
    assert stored["speedup_vs_xla_flash"] == pytest.approx(
        stored["dense_median_s"] / stored["sparse_median_s"]
    )
    assert (folder / "memory_plan.md").is_file()
    plan = (folder / "time_plan.md").read_text()
    assert "| whole run (s) |" in plan  # the FLOP model's rows beside the phases
    assert "| phase | estimate (s) | measured (s) | measured / estimate | source |" in plan
    # Every second of the run belongs to a phase: the phases sum to the wall within 2%.
    phases = json.loads((folder / "phases.json").read_text())
    accounted = sum(phase["seconds"] for phase in phases["phases"].values())
    assert abs(phases["wall_s"] - accounted) <= 0.02 * phases["wall_s"], phases
    assert phases["phases"]["sparse warm-up"]["entries"] == 1  # the routing recorded there
    # The run's measurement is kept for the next estimate of the same job.
    assert len(list((tmp / "cache" / "phases").glob("*.json"))) == 1
    # The noise floor compares two different dense executors: finite (the dense arm's own
    # executor run twice would give identical frames and an infinite floor).
    assert math.isfinite(stored["noise_floor_psnr_db"])
    client = MlflowClient(default_tracking_uri(tmp / "outputs"))
    mlrun = client.get_run(metrics["mlflow_run_id"])
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.params["schedule.name"] == "balanced"
    params = mlrun.data.params
    assert params["kernel.dense_executor"] != params["kernel.noise_floor_executor"]
    assert mlrun.data.tags["device_platform"] == "cpu"
    assert mlrun.data.metrics["speedup"] == pytest.approx(metrics["speedup"])
    assert mlrun.data.metrics["memory.peak"] > 0  # preflight's memory table, per arm too
    names = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {"dense.mp4", "sparse.mp4", "report.md"} <= names


# The metric keys of the default job (tiny model, balanced schedule, noise floor on, MLflow).
# Dashboards, sweep tables and gates read these names: a change here is a change of interface.
DEFAULT_JOB_METRIC_KEYS = {
    *(
        f"{arm}_{t}_s"
        for arm in ("dense", "noise_floor", "sparse")
        for t in ("median", "min", "max", "per_step")
    ),
    *(
        f"{what}_{arm}_s"
        for what in ("compile", "warmup", "decode")
        for arm in ("dense", "noise_floor", "sparse")
    ),
    "speedup",
    # The statistics across (prompt, seed) pairs that ``gate.on`` reads; one pair here.
    *(
        f"{name}_{stat}"
        for name in ("psnr_db", "psnr_frames_db", "psnr_worst_frame_db", "ssim_frames")
        for stat in ("mean", "std", "worst", "lcb", "ucb")
    ),
    *(
        f"{name}_{stat}"
        for name in ("speedup", "lpips")
        for stat in ("mean", "std", "worst", "lcb", "ucb")
    ),
    "lpips",  # AlexNet LPIPS, the papers' third column
    "noise_floor_lpips",
    "pairs",
    "dense_timing_reused",  # 1 only with reuse_dense_timing=true, which the gate then refuses
    "speedup_vs_xla_flash",  # our CPU dense control against the sparse arm
    "speedup_vs_dense_arm",  # the same by role: the kernel effect on any platform
    "speedup_vs_dot_product_attention",  # the other dense control on a CPU
    "dense_controls",
    "dense_control",
    "psnr_db",  # raw frames: what the gate reads
    "psnr_worst_frame_db",
    "psnr_ffmpeg_db",
    "codec_psnr_db",
    "gap_to_noise_floor_db",
    "psnr_frames_db",
    "psnr_video_db",
    "ssim_frames",
    "max_abs_latent_diff",
    "noise_floor_psnr_db",
    "noise_floor_psnr_frames_db",
    "noise_floor_psnr_worst_frame_db",
    "noise_floor_psnr_ffmpeg_db",
    "noise_floor_ssim_frames",
    "noise_floor_max_abs_latent_diff",
    "text_encode_s",
    "dense_cache",
    "dense_cache_key",
    "tokens",
    "schedule",
    "schedule_method",
    "schedule_kept_fraction",
    "mask_density",
    "mask_target_density",
    "dense_steps",
    "dense_layers",
    "attention_backend",
    "routing_flops_fraction",
    "routing_temporal_fraction",
    "phase_unaccounted_s",
    "tiles.tokens",
    "tiles.block_q",
    "tiles.block_kv",
    "tiles.num_q_tiles",
    "tiles.num_kv_tiles",
    "tiles.density",
    "tiles.target_density",
    "tiles.tiles_visited_fraction",
    "tiles.executed_pairs_fraction",
    "tiles.scan_executed_pairs_fraction",
    "tiles.scan_wasted_fraction",
    "tiles.masked_fraction",
    "tiles.padded_visit_fraction",
    "preflight.tokens",
    "preflight.attention_flops_per_step",
    "preflight.total_flops_per_step",
    "preflight.attention_share",
    "preflight.sparse_flops_per_step",
    "preflight.total_flops",
    "total_wall_s",
    "compile_cache_hits",
    "compile_cache_misses",
    "gate_passed",
    "run_dir",
    "mlflow_run_id",
    "wall_s",
    "estimate_wall_s",
}
# Every phase of the default job, measured (a CPU reports no device memory) and estimated.
DEFAULT_JOB_METRIC_KEYS |= {phase.metric for phase in Phase}
DEFAULT_JOB_METRIC_KEYS |= {"estimate_" + phase.metric.removeprefix("phase_") for phase in Phase}


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_default_job_metric_keys_are_unchanged(first_run):
    _, metrics = first_run
    assert set(metrics) == DEFAULT_JOB_METRIC_KEYS


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_dense_cache_hit_then_invalidation(first_run):
    tmp, metrics = first_run
    # Also the videos-off run: mp4 files stay in the run folder but are not uploaded.
    again = run(small_config(tmp, "schedule=aggressive", "logger.log_videos=false"))
    assert again["dense_cache"] == "hit"
    client = MlflowClient(default_tracking_uri(tmp / "outputs"))
    # The dense frames are reused, but every arm is timed again, in this run, after the first
    # run's timed window ended: the cache never carries a timing from another process.
    first_tags = client.get_run(metrics["mlflow_run_id"]).data.tags
    tags = client.get_run(again["mlflow_run_id"]).data.tags
    assert tags["dense_cache"] == "hit" and tags["dense_cache_key"] == again["dense_cache_key"]
    assert tags["dense_created_at"] == first_tags["dense_created_at"]
    for arm in ("dense", "sparse", "noise_floor"):
        assert tags[f"timed.{arm}"].split(" / ")[0] >= first_tags[f"timed.{arm}"].split(" / ")[1]
    assert again["dense_median_s"] != metrics["dense_median_s"]
    videos = {"dense.mp4", "sparse.mp4", "side_by_side.mp4", "noise_floor.mp4"}
    videos |= {"dense.lossless.mkv", "sparse.lossless.mkv", "noise_floor.lossless.mkv"}
    assert videos <= {p.name for p in Path(again["run_dir"]).iterdir()}
    uploaded = {a.path for a in client.list_artifacts(again["mlflow_run_id"])}
    assert not videos & uploaded
    assert {"metrics.json", "report.md", "config.yaml", "routing_stats.npz"} <= uploaded
    changed = run(small_config(tmp, "seed=7", "noise_floor=false", "logger=none"))
    assert changed["dense_cache"] == "miss"


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_gate_failure_raises_after_the_run_is_recorded(first_run):
    tmp, _ = first_run
    with pytest.raises(GateFailed, match="speedup") as info:
        run(small_config(tmp, "gate.min_speedup=1000", "logger=none"))
    assert (tmp / "outputs" / "runs").exists()
    assert info.value.metrics["gate_passed"] is False


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_failed_run_is_marked_failed_and_keeps_the_dense_arm(first_run, monkeypatch):
    tmp, _ = first_run
    import evalharness.evidence.run_folder as artifacts_module

    def broken(*args, **kwargs):
        raise OSError("disk full while writing the video")

    monkeypatch.setattr(artifacts_module, "encode_mp4", broken)
    # A failure while running is RunFailed (exit 4), its cause kept.
    with pytest.raises(RunFailed, match="disk full") as failure:
        run(small_config(tmp, "schedule=conservative"))
    assert isinstance(failure.value.__cause__, OSError)
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


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
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


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_multirun_reuses_one_dense_arm_and_prints_table(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "evalharness",
        "-m",
        "schedule=conservative,aggressive",  # two jobs show the reuse as well as three
        *SMALL,
        f"output_root={tmp_path}/o",
        f"cache_dir={tmp_path}/c",
        "logger=none",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Multirun summary (2 jobs, from " in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [r.split("|")[2].strip() for r in rows] == ["conservative", "aggressive"]
    assert [r.split("|")[-3].strip() for r in rows] == ["miss", "hit"]
    assert [r.split("|")[-2].strip() for r in rows] == ["FINISHED", "FINISHED"]
    assert len(list((tmp_path / "c" / "dense_arms").iterdir())) == 1


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
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
