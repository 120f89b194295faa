"""Benchmark timing on a fake clock, and the kernel table's fraction of ideal and its slow-baseline
flag on synthetic rows (no JAX work is timed here)."""

import pytest

from evalharness.bench import timing
from evalharness.bench.__main__ import format_report
from evalharness.bench.kernel_table import (
    SLOW_BASELINE,
    add_speedups,
    slow_baseline_notes,
)
from evalharness.bench.report import KERNEL_TABLE_COLUMNS, table
from evalharness.config import compose_run_config, to_config
from evalharness.machine import machine_info, machine_line
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan


class FakeClock:
    """Wall and CPU clocks that move only when a fake callable "runs".

    ``durations[name]`` lists the wall milliseconds of each call of ``name`` (the first is the
    warm-up); the CPU clock advances by half of each. Every call is logged, in order.
    """

    def __init__(self, durations: dict[str, list[float]]):
        self.durations = {name: list(ms) for name, ms in durations.items()}
        self.wall = 100.0
        self.cpu = 7.0
        self.calls: list[str] = []
        self.blocked: list[object] = []

    def fn(self, name: str):
        def call():
            self.calls.append(name)
            ms = self.durations[name].pop(0)
            self.wall += ms / 1e3
            self.cpu += ms / 2e3
            return (name, len(self.calls))  # what block_until_ready must be handed

        return call

    def clocks(self) -> dict:
        """The timer's injected clocks and block."""
        return {"clock": lambda: self.wall, "cpu_clock": lambda: self.cpu, "block": self.block}

    def block(self, value):
        self.blocked.append(value)
        return value


def test_the_warm_up_is_excluded_and_medians_taken():
    # A 1000 ms warm-up (the compile) that must not reach any statistic.
    clock = FakeClock({"a": [1000.0, 5.0, 1.0, 3.0, 2.0, 4.0]})
    stats = timing.time_warm_ms({"a": clock.fn("a")}, runs=5, **clock.clocks())["a"]
    assert stats["runs"] == 5
    assert stats["median_ms"] == pytest.approx(3.0)
    assert stats["min_ms"] == pytest.approx(1.0)
    assert stats["max_ms"] == pytest.approx(5.0)
    assert stats["cpu_median_ms"] == pytest.approx(1.5)
    assert clock.calls == ["a"] * 6  # one warm-up, five timed
    # Every call's result was blocked on, the warm-up's included, in order.
    assert clock.blocked == [("a", i) for i in range(1, 7)]


def test_even_runs_median_and_zero_runs_refused():
    clock = FakeClock({"a": [50.0, 4.0, 1.0, 2.0, 8.0]})
    stats = timing.time_warm_ms({"a": clock.fn("a")}, runs=4, **clock.clocks())
    assert stats["a"]["median_ms"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="warm_runs must be >= 1 .*, got 0"):
        timing.time_warm_ms({"a": clock.fn("a")}, runs=0)


def test_time_warm_ms_warms_all_then_runs_round_robin():
    clock = FakeClock(
        {
            "a": [900.0, 10.0, 30.0, 20.0],
            "b": [800.0, 2.0, 1.0, 3.0],
            "c": [700.0, 7.0, 7.0, 100.0],
        }
    )
    fns = {name: clock.fn(name) for name in ("a", "b", "c")}
    stats = timing.time_warm_ms(fns, runs=3, **clock.clocks())
    # Warm-ups first (a, b, c), then three rounds of a, b, c: never one variant's runs in a row.
    assert clock.calls == ["a", "b", "c"] * 4
    assert len(clock.blocked) == 12
    assert list(stats) == ["a", "b", "c"]
    assert {name: s["median_ms"] for name, s in stats.items()} == pytest.approx(
        {"a": 20.0, "b": 2.0, "c": 7.0}
    )
    assert (stats["a"]["min_ms"], stats["a"]["max_ms"]) == pytest.approx((10.0, 30.0))
    assert stats["c"]["max_ms"] == pytest.approx(100.0)  # a slow round shows in max, not median
    assert stats["b"]["cpu_median_ms"] == pytest.approx(1.0)
    assert all(s["runs"] == 3 for s in stats.values())
    with pytest.raises(ValueError, match="warm_runs must be >= 1 .*, got 0"):
        timing.time_warm_ms(fns, runs=0)


def _rows(ms: dict[str, float], cpu: dict[str, float] | None = None) -> list[dict]:
    cpu = ms if cpu is None else cpu
    return [{"variant": v, "median_ms": ms[v], "cpu_median_ms": cpu[v]} for v in ms]


def test_fraction_of_ideal_is_against_the_fastest_dense_row():
    density = 0.4
    # The dense control (8 ms) beats B0 (10 ms): it is the baseline.
    rows = _rows({"b0": 10.0, "dot_product_attention": 8.0, "b1": 6.0, "b2": 5.0, "b3": 4.0})
    add_speedups(rows, density)
    by = {r["variant"]: r for r in rows}
    for row in rows:
        baseline_ms = 8.0
        assert row["fastest_dense"] == "dot_product_attention"
        assert row["fraction_of_ideal"] == pytest.approx((baseline_ms / row["median_ms"]) * density)
        assert row["ideal_flag"] is None
    assert by["b3"]["speedup_vs_fastest_dense"] == pytest.approx(2.0)
    assert by["b3"]["fraction_of_ideal"] == pytest.approx(0.8)
    # Kept beside it: the speedup over our own B0 and over the dense control.
    assert by["b3"]["speedup_vs_b0"] == pytest.approx(2.5)
    assert by["b3"]["fraction_of_ideal_vs_b0"] == pytest.approx(1.0)
    assert by["b3"]["speedup_vs_dense"] == pytest.approx(2.0)
    assert by["b3"]["dense_control"] == "dot_product_attention"
    assert by["b3"]["mask_density"] == density
    assert slow_baseline_notes(rows) == []

    # B0 faster than the control: B0 is the baseline.
    rows = _rows({"b0": 6.0, "cudnn": 9.0, "b3": 3.0})
    add_speedups(rows, density, cpu=False)
    b3 = rows[-1]
    assert b3["fastest_dense"] == "b0"
    assert b3["fraction_of_ideal"] == pytest.approx((6.0 / 3.0) * density)
    assert "cpu_fraction_of_ideal" not in b3  # the host's CPU time is not judged on a GPU


def test_fraction_of_ideal_above_one_is_flagged_as_a_slow_baseline():
    density = 0.4
    # B3 at 3 ms against a 10 ms fastest dense row: 1.33 of ideal, which no kernel reaches.
    rows = _rows({"b0": 10.0, "dot_product_attention": 20.0, "b1": 6.0, "b2": 5.0, "b3": 3.0})
    add_speedups(rows, density)
    by = {r["variant"]: r for r in rows}
    assert by["b3"]["fraction_of_ideal"] == pytest.approx(10.0 / 3.0 * 0.4)
    assert by["b3"]["ideal_flag"] == SLOW_BASELINE == "baseline likely slow"
    assert [r["variant"] for r in rows if r["ideal_flag"]] == ["b3"]
    notes = slow_baseline_notes(rows)
    assert any(n.startswith("b3: 1.33 of ideal (wall-clock) against b0") for n in notes)
    assert all(SLOW_BASELINE in n for n in notes)

    rendered = table(rows, KERNEL_TABLE_COLUMNS)
    header, _, *body = rendered.splitlines()
    assert "| of ideal |" in header and header.endswith("| flag |")
    b3_line = next(line for line in body if line.startswith("| b3 |"))
    assert "| 1.333 |" in b3_line and b3_line.endswith(f"| {SLOW_BASELINE} |")
    assert next(line for line in body if line.startswith("| b2 |")).endswith("| - |")

    machine = machine_info()
    report = format_report(
        {
            "config": {"backend": "xla", "interpret": False, "block_kv": 32, "machine": machine},
            "notes": notes,
            "kernel_table": rows,
            "checks": {},
        }
    )
    assert report.startswith(machine_line(machine) + "\n")  # the benchmarks' one machine line
    assert "note: b3: 1.33 of ideal (wall-clock) against b0 is above 1" in report
    assert f"| {SLOW_BASELINE} |" in report

    # Only the CPU fraction above 1.0: flagged as such.
    rows = _rows({"b0": 10.0, "b3": 5.0}, cpu={"b0": 10.0, "b3": 2.0})
    add_speedups(rows, density)
    assert rows[1]["fraction_of_ideal"] == pytest.approx(0.8)
    assert rows[1]["ideal_flag"] == SLOW_BASELINE + " (CPU)"
    assert [n.split(":")[0] for n in slow_baseline_notes(rows)] == ["b3"]


def test_executed_pairs_count_whole_tiles_and_padding():
    geometry = TokenGeometry(4, 8, 8)  # 256 tokens
    mask = band_for_density(geometry, 0.39)
    b0 = build_plan(mask, BlockSizes(32, 32), "b0")
    assert b0.executed_pairs_fraction == pytest.approx(1.0)  # every tile, no padding
    b2 = build_plan(mask, BlockSizes(32, 32), "b2")
    visited = int(b2.full_count.sum() + b2.partial_count.sum())
    assert b2.executed_pairs_fraction == pytest.approx(visited * 32 * 32 / 256**2)
    assert mask.density <= b2.executed_pairs_fraction < 1.0
    # 96-token tiles on 256 tokens pad the grid to 288: B0 computes more than N^2 pairs.
    padded = build_plan(mask, BlockSizes(96, 96), "b0")
    assert padded.executed_pairs_fraction == pytest.approx((288 / 256) ** 2)


def _recording(monkeypatch, module) -> list[list]:
    """Swaps ``module.time_warm_ms`` for a log of each call's names that runs nothing (so
    nothing compiles) and answers 1 ms for every name."""
    calls: list[list] = []

    def record(fns, runs):
        calls.append(list(fns))
        return {name: {"median_ms": 1.0, "runs": runs} for name in fns}

    monkeypatch.setattr(module, "time_warm_ms", record)
    return calls


def test_sweep_temporal_and_placement_time_their_variants_round_robin(monkeypatch):

    import jax.numpy as jnp

    from evalharness.bench import placement, sweep, temporal

    geometry = TokenGeometry(4, 8, 8)
    common = {"batch": 2, "heads": 1, "head_dim": 32, "dtype": jnp.float32, "runs": 3}
    calls = _recording(monkeypatch, sweep)
    rows = sweep.block_q_sweep(geometry, 0.39, 32, (32, 64), **common)
    assert calls == [[32, 64]]  # every BQ in one round-robin, not one BQ after another
    assert [(r["block_q"], r["median_ms"], r["runs"]) for r in rows] == [(32, 1.0, 3), (64, 1.0, 3)]
    assert all(r["executed_pairs_fraction"] >= r["density"] for r in rows)

    calls = _recording(monkeypatch, temporal)
    # The permuted path is the run's own AttentionPolicy, so both paths run the real XLA kernel.
    rows = temporal.temporal_comparison(geometry, 0.39, BlockSizes(32, 32), **common)
    assert calls == [["permute_band_unpermute", "strided_in_place"]]
    assert [r["path"] for r in rows] == calls[0] and all(r["median_ms"] == 1.0 for r in rows)
    assert rows[0]["max_abs_difference_between_paths"] < 1e-4  # the same pairs either way

    calls = _recording(monkeypatch, placement)
    small = ["resolution.frames=17", "resolution.height=128", "resolution.width=128"]
    tiles = ["kernel.block_q=32", "kernel.block_kv=32"]
    cfg = to_config(compose_run_config(["parallel.sequence=1", "warm_runs=3", *small, *tiles]))
    run = placement.settings(cfg)
    assert (run.geometry, run.block_sizes) == (TokenGeometry(5, 8, 8), BlockSizes(32, 32))
    rows = placement._rows(run, placement._policy(run))
    assert calls == [[r["variant"] for r in rows]] and len(rows) == 3
    assert all(r["median_ms"] == 1.0 for r in rows) and "sent_mb" in rows[1]


def test_on_an_accelerator_no_speedup_is_read_from_host_cpu_time(monkeypatch):
    """On a TPU the host only dispatches and waits: its CPU medians can be 0 ms (measured on a
    TPU v5e). They are shown, but no speedup, fraction or check divides by them."""
    from evalharness.bench import checks, schedules

    rows = _rows(
        {"b0": 186.0, "splash": 188.0, "b1": 89.0, "b2": 86.0, "b3": 75.0},
        cpu={"b0": 10.0, "splash": 0.0, "b1": 0.0, "b2": 0.0, "b3": 0.0},
    )
    for row in rows:
        row["mask_density"] = 0.3887
    add_speedups(rows, 0.3887, cpu=False)
    assert not any(key.startswith("cpu_") and key != "cpu_median_ms" for r in rows for key in r)
    monkeypatch.setattr(checks, "cpu_time_measures_compute", lambda: False)
    verdicts = checks.acceptance_checks(rows, [], "pallas_tpu")
    assert verdicts["b3_at_least_0.95_of_ideal"] is True
    assert not any(name.endswith("_cpu") for name in verdicts)
    monkeypatch.setattr(schedules, "cpu_time_measures_compute", lambda: False)
    arms = [
        {"schedule": s, "cpu_median_ms": 0.0, "median_ms": ms, "min_ms": ms, "max_ms": ms}
        | {"dense_steps": 0, "dense_layers": 0}
        for s, ms in (("dense", 900.0), ("aggressive", 600.0))
    ]
    assert [r["cpu_speedup_vs_dense"] for r in schedules._table_rows(arms)] == [None, None]
