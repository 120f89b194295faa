"""The CPU dense-control benchmark's paired ratios and checks, on synthetic samples (nothing timed)."""

import pytest

from evalharness.bench.dense_cpu import format_table, paired_ratio, summarize, time_rounds


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
        "geometry": "issue",
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
    assert "| xla_flash | 115.0 (110.0-120.0) | 205 | 1.15 (1.10-1.20) | - |" in table


def test_time_rounds_runs_round_robin_after_warm_ups():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    samples = time_rounds(fns, rounds=2)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert [len(s["wall_ms"]) for s in samples.values()] == [2, 2]
    with pytest.raises(ValueError, match="rounds=0"):
        time_rounds(fns, rounds=0)
