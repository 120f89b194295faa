"""The CPU dense-control benchmark's paired ratios and checks, on synthetic samples (nothing timed)."""

import pytest

from evalharness.bench.dense_cpu import (
    APART,
    format_table,
    paired_ratio,
    summarize,
    time_geometry,
)


def test_paired_ratio_is_per_round():
    # A slow second round hits both rows: the paired ratio stays 2, the ratio of medians would not.
    ratio = paired_ratio([2.0, 20.0, 4.0], [1.0, 10.0, 2.0])
    assert ratio == pytest.approx({"median": 2.0, "min": 2.0, "max": 2.0})


def test_summarize_checks_the_issue_bounds():
    samples = {
        "xla_flash": {"wall_ms": [110.0, 120.0, 115.0], "cpu_ms": [200.0, 210.0, 205.0]},
        "b0": {"wall_ms": [200.0, 210.0, 205.0], "cpu_ms": [1.0, 1.0, 1.0]},
        "b3": {"wall_ms": [44.0, 48.0, 46.0], "cpu_ms": [1.0, 1.0, 1.0]},
        "torch_sdpa": {"wall_ms": [100.0, 100.0, 100.0], "cpu_ms": [1.0, 1.0, 1.0]},
    }
    info = {
        "geometry": "long",
        "shape": [1, 16128, 2, 128],
        "tiles": [768, 768],
        "mask_density": 0.39,
        "b3_executed_pairs_fraction": 0.4,
    }
    result = summarize(samples, info)
    assert result["rows"]["xla_flash"]["median_ms"] == 115.0
    assert result["rows"]["xla_flash"]["cpu_median_ms"] == 205.0
    checks = result["checks"]
    assert checks["xla_flash_vs_torch_sdpa"]["value"] == pytest.approx(1.15)
    assert checks["xla_flash_vs_torch_sdpa"]["ok"]
    # B3 runs 40% of the pairs 2.5x faster than xla_flash: exactly the ideal.
    assert checks["b3_speedup_vs_xla_flash"]["value"] == pytest.approx(2.5)
    assert checks["b3_speedup_vs_xla_flash"]["off_by"] == pytest.approx(1.0)
    assert checks["b3_speedup_vs_xla_flash"]["ok"]
    table = format_table(result)
    assert "| xla_flash | 115.0 (110.0-120.0) | 205 | - | 1.15 (1.10-1.20) | - |" in table


def _info(**extra):
    return {
        "geometry": "long",
        "shape": [1, 16128, 2, 128],
        "tiles": [768, 768],
        "mask_density": 0.39,
        "b3_executed_pairs_fraction": 0.4,
        **extra,
    }


def test_the_matmul_ceiling_says_whether_the_sdpa_bound_is_reachable():
    # xla_flash runs these matmuls and more, so its ratio to SDPA cannot beat theirs.
    samples = {
        "xla_flash": {"wall_ms": [150.0, 150.0], "cpu_ms": [300.0, 300.0]},
        "torch_sdpa": {"wall_ms": [100.0, 100.0], "cpu_ms": [200.0, 200.0]},
        "xla_matmuls": {"wall_ms": [130.0, 130.0], "cpu_ms": [250.0, 250.0]},
    }
    checks = summarize(samples, _info())["checks"]
    assert checks["xla_flash_vs_torch_sdpa"]["ok"] is False
    assert checks["xla_matmuls_vs_torch_sdpa"] == {"value": 1.3, "bound_reachable": False}
    samples["xla_matmuls"]["wall_ms"] = [110.0, 110.0]
    checks = summarize(samples, _info())["checks"]
    assert checks["xla_matmuls_vs_torch_sdpa"]["bound_reachable"] is True


def test_rate_column_divides_flops_by_cpu_time():
    samples = {"xla_flash": {"wall_ms": [60.0], "cpu_ms": [100.0]}}
    result = summarize(samples, _info(flops={"xla_flash": 2.0e10}))
    assert result["rows"]["xla_flash"]["gflops_per_core"] == pytest.approx(200.0)
    assert "| xla_flash | 60.0 (60.0-60.0) | 100 | 200 | - | - |" in format_table(result)


def test_rows_timed_apart_run_after_the_paired_rounds_and_their_ratios_say_unpaired():
    calls = []
    names = ("xla_flash", APART[0], "b3")
    fns = {name: (lambda name=name: calls.append(name)) for name in names}
    samples = time_geometry(fns, rounds=2)
    # The paired rows' warm-ups and rounds first, then the apart row's on its own.
    assert calls == ["xla_flash", "b3"] * 3 + [APART[0]] * 3
    assert list(samples) == list(names)
    assert samples[APART[0]]["paired"] is False and samples["b3"]["paired"] is True
    samples[APART[0]].update(wall_ms=[40.0, 60.0])
    samples["xla_flash"].update(wall_ms=[10.0, 10.0])
    samples["b3"].update(wall_ms=[5.0, 5.0])
    result = summarize(samples, _info())
    ratio = result["rows"][APART[0]]["vs_xla_flash"]
    assert ratio["unpaired"] and ratio["median"] == pytest.approx(5.0)
    assert f"| {APART[0]} |" in format_table(result) and "5.00 (unpaired)" in format_table(result)


def test_paired_rows_run_round_robin_after_warm_ups():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    samples = time_geometry(fns, rounds=2)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert [len(s["wall_ms"]) for s in samples.values()] == [2, 2]
    assert [len(s["cpu_ms"]) for s in samples.values()] == [2, 2]
    with pytest.raises(ValueError, match="got 0"):
        time_geometry(fns, rounds=0)
    assert calls == ["a", "b"] * 3  # a refused count runs nothing, not even a warm-up
