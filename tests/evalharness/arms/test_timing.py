"""Timing metrics: medians of warm runs, and speedups against every timed dense control."""

import pytest

from evalharness.arms.timing import (
    RunTimes,
    fastest_control,
    time_interleaved,
    timing_metrics,
)


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
    assert metrics["speedup_vs_dense_arm"] == pytest.approx(4.0)  # the kernel effect, by role
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


class _FakeClock:
    """Monotonic seconds that only move when a fake computation 'runs'."""

    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now


def _fake_call(clock, durations, log, name):
    """A zero-argument 'compiled call' that takes the next of ``durations`` seconds."""
    durations = iter(durations)

    def call():
        log.append(name)
        clock.now += next(durations)
        return name

    return call


@pytest.mark.parametrize(
    ("durations", "median"), [((5.0, 1.0, 3.0), 3.0), ((4.0, 1.0, 3.0, 2.0), 2.5)]
)
def test_timed_runs_median_min_max_for_odd_and_even_counts(durations, median):
    clock = _FakeClock()
    call = _fake_call(clock, durations, [], "f")
    times = time_interleaved(
        {"f": call},
        len(durations),
        steps={"f": 4},
        clock=clock,
        block=lambda out: None,
        wall_clock=lambda: 7.0,
    )["f"]
    assert times.runs_s == durations
    assert (times.median_s, times.min_s, times.max_s) == (median, min(durations), max(durations))
    assert times.per_step_s == pytest.approx(median / 4)


def test_interleaved_rounds_alternate_and_block_once_per_run():
    clock, blocked, log, rounds = _FakeClock(), [], [], []
    calls = {
        "dense": _fake_call(clock, [4.0, 6.0, 5.0], log, "dense"),
        "sparse": _fake_call(clock, [1.0, 3.0, 2.0], log, "sparse"),
    }
    times = time_interleaved(
        calls,
        3,
        steps={"dense": 2, "sparse": 2},
        clock=clock,
        block=blocked.append,
        on_round=lambda done, runs: rounds.append((done, {k: list(v) for k, v in runs.items()})),
    )
    assert log == ["dense", "sparse"] * 3
    assert blocked == log  # each run waited on before the next starts
    assert [done for done, _ in rounds] == [1, 2, 3]
    # Each round reports every arm's runs so far, for a benchmark's per-round line.
    assert rounds[1][1] == {"dense": [4.0, 6.0], "sparse": [1.0, 3.0]}
    assert list(times) == ["dense", "sparse"]
    assert times["dense"].runs_s == (4.0, 6.0, 5.0) and times["sparse"].runs_s == (1.0, 3.0, 2.0)
    assert times["dense"].median_s / times["sparse"].median_s == pytest.approx(2.5)


def test_interleaved_window_is_each_arms_first_start_to_last_end():
    clock, log = _FakeClock(), []
    wall = iter(range(100, 200))
    calls = {name: _fake_call(clock, [1.0, 1.0], log, name) for name in ("dense", "sparse")}
    times = time_interleaved(
        calls, 2, block=lambda out: None, clock=clock, wall_clock=lambda: next(wall)
    )
    # Reads: dense start 100, end 101; sparse start 102, end 103; dense end 104; sparse end 105.
    assert (times["dense"].timed_from, times["dense"].timed_until) == (100, 104)
    assert (times["sparse"].timed_from, times["sparse"].timed_until) == (102, 105)


def test_interleaved_check_sees_every_result_and_can_stop_the_timing():
    clock, log, seen = _FakeClock(), [], []

    def check(name, result):
        seen.append(name)
        if len(seen) == 3:
            raise RuntimeError("bad result")

    calls = {name: _fake_call(clock, [1.0] * 5, log, name) for name in ("a", "b")}
    with pytest.raises(RuntimeError, match="bad result"):
        time_interleaved(calls, 5, check=check, clock=clock, block=lambda out: None)
    assert seen == ["a", "b", "a"] and log == ["a", "b", "a"]


@pytest.mark.parametrize("warm_runs", [0, -1, True, 2.0])
def test_interleaved_refuses_a_bad_run_count(warm_runs):
    with pytest.raises(ValueError, match="warm_runs must be >= 1"):
        time_interleaved({"a": lambda: None}, warm_runs)


def test_interleaved_refuses_nothing_to_time():
    with pytest.raises(ValueError, match="nothing to time"):
        time_interleaved({}, 2)


def test_run_times_json_keeps_the_window_and_reads_entries_without_it():
    times = RunTimes((1.0, 2.0), steps=3, timed_from=10.0, timed_until=12.5)
    assert RunTimes.from_json(times.to_json()) == times
    old = RunTimes.from_json({"runs_s": [1.0, 2.0], "steps": 3})
    assert old.timed_from is None and old.timed_until is None and old.median_s == 1.5


def test_timed_window_tags_are_utc_windows_per_arm():
    import types

    from evalharness.arms.timing import RunTimes, timed_window_tags

    timed = RunTimes((1.0, 2.0), timed_from=0.0, timed_until=90.0)
    arms = [
        types.SimpleNamespace(label="dense", times=timed),
        types.SimpleNamespace(label="sparse", times=RunTimes((1.0,))),  # no window recorded
        None,
    ]
    assert timed_window_tags(arms) == {
        "timed.dense": "1970-01-01T00:00:00+00:00 / 1970-01-01T00:01:30+00:00"
    }
