"""The typed result rooms pass each other: headline metrics as fields named as the metrics are,
everything else by name, frozen, read as a mapping by files, MLflow and the gate."""

import dataclasses
import json
import math

import pytest

from evalharness.evidence import run_folder
from evalharness.gate import check_gate
from evalharness.metric_names import Metric, RunMetrics


def _measured() -> RunMetrics:
    return RunMetrics.of(
        {
            "dense_median_s": 3.6,
            Metric.SPEEDUP: 1.12,
            Metric.PSNR_DB: 28.9,
            Metric.PSNR_WORST_FRAME_DB: 25.2,
            "dense_control": "xla_flash",
            Metric.DENSE_TIMING_REUSED: 0,
            "gate_passed": True,
        }
    )


def test_the_headline_fields_are_the_metric_names():
    fields = {f.name for f in dataclasses.fields(RunMetrics)} - {"others"}
    assert fields == {m.value for m in Metric} - {Metric.PSNR_VIDEO_DB}


def test_headline_metrics_are_fields_and_the_rest_is_read_by_name():
    metrics = _measured()
    assert metrics.speedup == metrics["speedup"] == 1.12
    assert metrics.psnr_db == 28.9 and metrics["dense_control"] == "xla_flash"
    # Not measured: no field value, no key.
    assert metrics.noise_floor_psnr_db is None and Metric.NOISE_FLOOR_PSNR_DB not in metrics
    with pytest.raises(KeyError):
        metrics[Metric.NOISE_FLOOR_PSNR_DB]
    assert dict(metrics) == {**metrics} and len(metrics) == 7


def test_it_is_frozen_and_a_stage_adds_figures_as_a_new_value():
    metrics = _measured()
    with pytest.raises(dataclasses.FrozenInstanceError):
        metrics.speedup = 9.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        metrics.others["x"] = 1  # type: ignore[index]
    more = metrics.with_values({"total_wall_s": 90.0}, speedup=1.2, run_dir="/r")
    assert more.speedup == 1.2 and more["total_wall_s"] == 90.0 and more["run_dir"] == "/r"
    assert metrics.speedup == 1.12 and "total_wall_s" not in metrics


def test_mlflow_gets_the_numbers_and_metrics_json_every_value(tmp_path):
    metrics = _measured().with_values(psnr_db=math.inf)
    numbers = metrics.numeric()
    assert "dense_control" not in numbers and numbers["gate_passed"] is True
    assert numbers[Metric.SPEEDUP] == 1.12
    written = json.loads(run_folder.write_metrics(tmp_path, metrics).read_text())
    assert written[Metric.PSNR_DB] == "inf" and written["dense_control"] == "xla_flash"
    assert set(written) == set(metrics)


def test_the_gate_reads_the_typed_result():
    metrics = _measured()
    assert check_gate(metrics, min_psnr_db=28.0, min_speedup=1.1).passed
    failed = check_gate(metrics, min_psnr_db=30.0, min_speedup=None)
    assert not failed.passed and "psnr_db = 28.9 is below" in failed.failures[0]
    reused = metrics.with_values(dense_timing_reused=1)
    assert not check_gate(reused, min_psnr_db=None, min_speedup=1.0).passed
