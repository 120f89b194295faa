"""Timing metrics: medians of warm runs, and speedups against every timed dense control."""

import pytest

from evalharness.timing import RunTimes, fastest_control, time_warm_runs, timing_metrics


class _Arm:
    def __init__(self, label, runs):
        self.label = label
        self.times = RunTimes(tuple(runs), steps=4) if runs else None
        self.compile_s = self.warmup_s = self.decode_s = 0.5


def test_run_times_median_min_max_per_step():
    times = RunTimes((3.0, 1.0, 2.0, 10.0, 2.5), steps=5)
    assert times.median_s == 2.5
    assert (times.min_s, times.max_s) == (1.0, 10.0)
    assert times.per_step_s == pytest.approx(0.5)
    assert RunTimes.from_json(times.to_json()) == times


def test_headline_speedup_is_against_the_fastest_dense_control():
    dense, floor = _Arm("dense", [4.0, 4.2, 3.9]), _Arm("noise_floor", [2.0, 2.1, 1.9])
    sparse = _Arm("sparse", [1.0, 1.1, 0.9])
    metrics = timing_metrics(
        dense, sparse, floor, executors={"dense": "b0", "noise_floor": "cudnn"}
    )
    assert metrics["speedup_vs_b0"] == pytest.approx(4.0)
    assert metrics["speedup_vs_cudnn"] == pytest.approx(2.0)
    assert metrics["speedup"] == pytest.approx(2.0)  # the faster control, not our B0
    assert fastest_control(metrics) == "cudnn"
    assert metrics["dense_controls"] == 2


def test_untimed_noise_floor_is_not_a_control():
    dense, sparse = _Arm("dense", [3.0]), _Arm("sparse", [1.5])
    metrics = timing_metrics(dense, sparse, _Arm("noise_floor", []), executors={"dense": "b0"})
    assert metrics["speedup"] == pytest.approx(2.0)
    assert metrics["dense_controls"] == 1
    assert "noise_floor_median_s" not in metrics


def test_a_slow_sparse_arm_reads_below_one():
    metrics = timing_metrics(_Arm("dense", [1.0]), _Arm("sparse", [2.0]))
    assert metrics["speedup"] == pytest.approx(0.5)


def test_fastest_control_without_controls_is_an_error():
    with pytest.raises(ValueError, match="no dense control"):
        fastest_control({"speedup": 1.0})


def test_time_warm_runs_counts_runs_and_refuses_zero():
    calls = []
    result, times = time_warm_runs(lambda x: calls.append(x) or x, 3, warm_runs=4, steps=2)
    assert result == 3 and len(calls) == 4 and len(times.runs_s) == 4 and times.steps == 2
    with pytest.raises(ValueError, match="warm_runs must be >= 1"):
        time_warm_runs(lambda: None, warm_runs=0)
