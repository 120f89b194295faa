"""A TPU v5e's time estimate against what a lent v5e measured: the rates are fitted to its 720p
loops (Wan 1.3B, 2 steps) and checked against its 480p loops (4 steps), out of sample."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evalharness.admission import checkpoint_optional, estimate_run_time
from evalharness.assembly import platform_choices
from evalharness.config import compose_run_config, to_config
from evalharness.estimates import get_target, rates_for, seed_prediction
from evalharness.estimates.time_rates import tpu_generation
from evalharness.estimates.v5e_measurements import (
    V5E_KERNEL_MS,
    V5E_SCHEDULES_480P,
    V5E_SCHEDULES_720P,
)
from models.config import get_transformer_config

MEASUREMENTS = Path(__file__).resolve().parents[3] / "docs" / "measurements"


def _arms(name: str) -> dict:
    result = json.loads((MEASUREMENTS / name).read_text())
    return result, {arm["schedule"]: arm for arm in result["arms"]}


def test_the_fitted_figures_are_the_committed_measurements():
    result, arms = _arms("tpu-v5e-schedules-720p-routing-kernel.json")
    m = V5E_SCHEDULES_720P
    assert result["machine"]["jax_backend"] == "tpu" and result["steps"] == m["steps"]
    assert result["geometry"]["tokens"] == m["tokens"]
    assert arms["dense"]["median_ms"] == pytest.approx(m["dense_loop_ms"], abs=0.01)
    aggressive = arms["aggressive"]
    assert aggressive["median_ms"] == pytest.approx(m["aggressive_loop_ms"], abs=0.01)
    assert aggressive["kept_fraction"] == pytest.approx(m["aggressive_kept"], abs=1e-6)
    assert aggressive["dense_attention_ms"] == pytest.approx(m["dense_attention_ms"], abs=1e-3)
    assert aggressive["band_kernel_ms"] == pytest.approx(m["aggressive_band_kernel_ms"], abs=1e-3)
    result, arms = _arms("tpu-v5e-schedules-480p-4-steps-routing-kernel.json")
    assert result["steps"] == V5E_SCHEDULES_480P["steps"]
    assert arms["dense"]["median_ms"] == pytest.approx(
        V5E_SCHEDULES_480P["dense_loop_ms"], abs=0.01
    )
    assert arms["aggressive"]["median_ms"] == pytest.approx(
        V5E_SCHEDULES_480P["aggressive_loop_ms"], abs=0.01
    )


def test_the_variants_ratios_are_the_committed_kernel_table():
    table = json.loads((MEASUREMENTS / "tpu-v5e-kernel-table-720p.json").read_text())
    assert table["config"]["backend"] == "pallas_tpu" and table["config"]["tokens"] == 75_600
    measured = {row["variant"]: row["median_ms"] for row in table["kernel_table"]}
    for variant, ms in V5E_KERNEL_MS.items():
        assert measured[variant] == pytest.approx(ms, abs=0.01)


def test_a_v5e_gets_the_v5e_rates_and_a_v6e_keeps_the_seeds():
    v5e = get_target("tpu-v5e-1")
    assert tpu_generation(v5e) == "v5e" and "v5e" in rates_for(v5e).sources["attention"]
    # A real run's host target is named after the device kind JAX reports.
    host = dataclasses.replace(v5e, name="TPU v5 lite", topology=None)
    assert rates_for(host) == rates_for(v5e)
    v6e = get_target("tpu-v6e-8")
    assert tpu_generation(v6e) == "v6e" and "seed" in rates_for(v6e).sources["attention"]
    rates = rates_for(v5e)
    assert 0.5 < rates.attention_efficiency < 1.0 and 0.5 < rates.matmul_efficiency < 1.0
    assert rates.variant_efficiency["b1"] < rates.variant_efficiency["b2"]
    assert rates.variant_efficiency["b2"] < rates.variant_efficiency["b3"] < 1.0
    assert rates.sparse_overhead_s_per_element > 0 and rates.interconnect_bytes_per_s is None


def _predict(resolution: str, steps: int) -> dict[str, float]:
    raw = compose_run_config(
        [
            "model=wan2.1-t2v-1.3b",
            "model.checkpoint=random",
            f"resolution={resolution}",
            f"steps={steps}",
            "schedule=aggressive",
            "dtype=bfloat16",
        ]
    )
    target = get_target("tpu-v5e-1")
    cfg = platform_choices.resolve(to_config(checkpoint_optional(raw)), target.platform)
    tcfg = get_transformer_config(cfg.model.name)
    timing, work = estimate_run_time(cfg, tcfg, target, devices=1)
    return seed_prediction(timing, work, tcfg, rates_for(target))


def test_the_720p_fit_predicts_the_480p_loops():
    fitted = _predict("720p", V5E_SCHEDULES_720P["steps"])
    assert fitted["dense_s"] * 1e3 == pytest.approx(V5E_SCHEDULES_720P["dense_loop_ms"], rel=0.02)
    assert fitted["sparse_s"] * 1e3 == pytest.approx(
        V5E_SCHEDULES_720P["aggressive_loop_ms"], rel=0.02
    )
    # Out of sample (measured: dense 15.11 s, aggressive 9.75 s, 1.55x; predicted 14.75 s and
    # 9.42 s, about 2% and 3% short, 1.57x): loops within 15%, the speedup within 5%.
    check = _predict("480p", V5E_SCHEDULES_480P["steps"])
    dense_ms, sparse_ms = (V5E_SCHEDULES_480P[k] for k in ("dense_loop_ms", "aggressive_loop_ms"))
    assert check["dense_s"] * 1e3 == pytest.approx(dense_ms, rel=0.15)
    assert check["sparse_s"] * 1e3 == pytest.approx(sparse_ms, rel=0.15)
    assert check["speedup"] == pytest.approx(dense_ms / sparse_ms, rel=0.05)
