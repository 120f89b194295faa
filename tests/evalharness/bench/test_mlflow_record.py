"""Benchmark results as MLflow records: metric names, files, and each benchmark's record, from
synthetic results (nothing is timed; the logged runs themselves are checked in test_reports)."""

from __future__ import annotations

import argparse
import json

from mlflow.tracking import MlflowClient

from evalharness.bench import placement, schedules
from evalharness.bench.kernel_records import kernel_records
from evalharness.bench.mlflow_record import (
    BenchRecord,
    add_tracking_args,
    log_records,
    metric_name,
    version_params,
    write_record_files,
)
from evalharness.config import compose_run_config, to_config

MACHINE = {
    "processor": "x86_64",
    "platform": "Linux",
    "cpu_count": 2,
    "jax_backend": "cpu",
    "jax_version": "0.0",
    "devices": "cpu:0",
}


def _timing(ms: float) -> dict:
    return {"median_ms": ms, "min_ms": ms * 0.9, "max_ms": ms * 1.1, "cpu_median_ms": ms}


def test_metric_names_keep_only_what_mlflow_accepts():
    assert metric_name("8 devices, head_local") == "8 devices_ head_local"
    assert metric_name("b3") == "b3" and metric_name("a/b.c-d e") == "a/b.c-d e"
    record = BenchRecord(
        "x",
        {},
        [{"variant": "b3", "median_ms": 1.5, "flag": None, "ok": True, "inf": float("inf")}],
        "variant",
        "",
    )
    assert record.metrics() == {"b3.median_ms": 1.5}


def test_tracking_option_and_versions():
    parser = argparse.ArgumentParser()
    add_tracking_args(parser)
    assert not parser.parse_args([]).mlflow and parser.parse_args(["--mlflow"]).mlflow
    assert set(version_params()) >= {"version.jax", "version.jaxlib", "version.flax"}


def test_a_record_goes_to_the_store_and_experiment_of_the_run_config(tmp_path):
    uri = f"sqlite:///{tmp_path / 'bench.db'}"
    overrides = [f"logger.tracking_uri={uri}", "logger.experiment_name=bench"]
    cfg = to_config(compose_run_config([*overrides, f"output_root={tmp_path / 'out'}"]))
    record = BenchRecord("x", {"tokens": 320}, [{"variant": "b3", "median_ms": 1.5}], "variant", "")
    (run_id,) = log_records(cfg, [record])
    run = MlflowClient(uri).get_run(run_id)
    assert MlflowClient(uri).get_experiment(run.info.experiment_id).name == "bench"
    assert run.data.tags["bench"] == "x" and run.data.params["tokens"] == "320"
    assert run.data.metrics == {"b3.median_ms": 1.5}
    assert (tmp_path / "out" / "mlartifacts").is_dir()


def _kernel_result() -> dict:
    config = {"backend": "xla", "interpret": False, "tokens": 320, "machine": MACHINE}
    table = [
        {"variant": v, **_timing(ms), "masked_fraction": f}
        for v, ms, f in (("b0", 2.0, 0.0), ("b3", 1.0, 0.02))
    ]
    sweep = [{"variant": "b2", "block_q": q, "block_kv": 64, **_timing(1.0)} for q in (32, 64)]
    return {
        "config": config,
        "kernel_table": table,
        "bq_sweep": sweep,
        "notes": ["tile sweep 32x64: slow", "kernel table: of ideal"],
        "checks": {"b3_fastest": True},
    }


def test_kernel_records_one_per_part_with_its_notes(tmp_path):
    plot = tmp_path / "sweep.png"
    plot.write_bytes(b"png")
    records = kernel_records(_kernel_result(), "cpu", {"bq_sweep": str(plot)})
    assert [r.bench for r in records] == ["kernel_table", "tile_sweep"]
    table, sweep = records
    assert table.tags == {"backend": "xla", "resolution": "cpu"}
    assert table.metrics()["b3.median_ms"] == 1.0 and "Checks" in table.markdown
    assert sweep.metrics()["64x64.median_ms"] == 1.0
    assert "tile sweep 32x64" in sweep.markdown and "kernel table:" not in sweep.markdown
    files = write_record_files(sweep, tmp_path / "out")
    assert [f.name for f in files] == ["tile_sweep.md", "tile_sweep.json", "sweep.png"]
    data = json.loads((tmp_path / "out" / "tile_sweep.json").read_text())
    assert data["config"]["machine"] == MACHINE and data["rows"][0]["tile"] == "32x64"


def test_schedule_record():
    arms = [
        {
            "schedule": name,
            "kept_fraction": kept,
            "dense_steps": 0,
            "dense_layers": 0,
            **_timing(ms),
            "wall_ms": [ms],
            "cpu_ms": [ms],
            "speedup_vs_dense": 10.0 / ms,
            "routing_flops_fraction": 0.0,
            "compile_and_warm_s": 1.0,
        }
        for name, kept, ms in (("dense", 1.0, 10.0), ("aggressive", 0.3, 5.0))
    ]
    result = {
        "machine": MACHINE,
        "model": "tiny-random (random weights)",
        "resolution": "cpu",
        "dtype": "float32",
        "geometry": {"frames": 5, "height": 8, "width": 8, "tokens": 320, "pixels": [17, 128, 128]},
        "steps": 2,
        "runs": 3,
        "block_sizes": [8, 8],
        "backend": "xla",
        "dense_executor": "xla_flash",
        "sampler": "unipc",
        "guidance": {"scale": 5.0, "passes": "joint", "batch": 2},
        "seed": 42,
        "routing_flops_fraction_720p": {"aggressive": 0.01},
        "arms": arms,
    }
    record = schedules.record(result)
    assert record.bench == "schedules" and record.row_key == "schedule"
    assert record.tags == {"model": "tiny-random", "resolution": "cpu", "backend": "xla"}
    assert record.metrics()["aggressive.speedup_vs_dense"] == 2.0
    assert "aggressive.wall_ms" not in record.metrics()
    assert record.config["guidance"]["batch"] == 2 and "arms" not in record.config
    assert record.markdown.startswith("tiny-random (random weights), resolution cpu (17 frames")


def test_placement_record():
    config = {
        "model": "tiny",
        "resolution": "cpu",
        "schedule": "balanced",
        "geometry": "9 x 12 x 20",
        "tokens": 2160,
        "batch": 2,
        "heads": 4,
        "head_dim": 64,
        "dtype": "float32",
        "target_density": 0.35,
        "density": 0.35,
        "variant": "b3",
        "backend": "xla",
        "block_q": 128,
        "block_kv": 128,
        "devices": 4,
        "parallel_sequence": 0,
        "host_devices": 4,
        "runs": 3,
        "full_720p": placement.FULL_720P,
    }
    rows = [{"variant": "4 devices, head_local", **_timing(3.0), "sent_mb": 1.0}]
    placed = placement.record({"machine": MACHINE, "config": config, "rows": rows})
    assert placed.bench == "placement" and placed.tags == {"backend": "xla"}
    assert placed.metrics()["4 devices_ head_local.sent_mb"] == 1.0
    assert "model tiny, resolution cpu" in placed.markdown
    assert "this benchmark exposed 4 host devices" in placed.markdown


def test_memory_prediction_record():
    from evalharness.bench import memory

    rows = [{"shape": "cpu", "tokens": 2160, "arm": "dense", "measured_gib": 0.5, "dominant": "x"}]
    record = memory.record(rows, ["cpu"])
    assert record.bench == "memory_prediction"
    assert record.metrics() == {"cpu/dense.tokens": 2160.0, "cpu/dense.measured_gib": 0.5}
