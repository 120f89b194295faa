"""The whole job's estimate, phase by phase: measured where the same job was measured (scaled by
its work), the FLOP model elsewhere, and never silent about a phase it cannot estimate."""

from __future__ import annotations

import json

import pytest

from evalharness.estimates import (
    JobKey,
    JobWork,
    MeasuredJob,
    estimate_job,
    load_history,
    record_job,
)
from evalharness.estimates.phase_estimate import FLOP_MODEL, MEASURED, NOT_ESTIMATED
from evalharness.phases import Phase, PhaseLedger

KEY = JobKey("tpu-v5e", 1, "wan2.1-t2v-1.3b", (81, 720, 1280))
WORK = JobWork(steps=2, warm_runs=1, pairs=1, prompts=1, arms=("dense", "sparse"), frames=81)


def _job(phases, *, work=WORK, key=KEY, model=None, created_at=1.0, cache_hits=0):
    return MeasuredJob(
        key, work, phases, model or {}, sum(phases.values()), created_at, 1e12, cache_hits
    )


def test_without_a_measurement_every_phase_is_the_flop_models_or_says_it_is_missing():
    estimate = estimate_job(
        KEY, WORK, {Phase.TIMING: 40.0, Phase.DECODE: 5.0}, [], flops_per_s=1e12, warm_cache=False
    )
    assert estimate.of(Phase.TIMING).source == FLOP_MODEL
    assert estimate.of(Phase.TIMING).seconds == 40.0
    assert estimate.of(Phase.WEIGHTS).source == NOT_ESTIMATED
    assert estimate.of(Phase.NOISE_FLOOR_COMPILE) is None  # no noise floor in this job
    assert estimate.total_s == 45.0
    assert "not estimated" in estimate.summary()


def test_a_measurement_of_the_same_job_is_scaled_by_its_work():
    measured = _job({"timing": 47.0, "weights": 9.0, "decode": 20.0, "sparse warm-up": 15.0})
    more = JobWork(steps=4, warm_runs=3, pairs=1, prompts=1, arms=("dense", "sparse"), frames=81)
    estimate = estimate_job(KEY, more, {}, [measured], flops_per_s=1e12, warm_cache=False)
    assert estimate.of(Phase.TIMING).source == MEASURED
    assert estimate.of(Phase.TIMING).seconds == pytest.approx(47.0 * 2 * 3)  # steps x rounds
    assert estimate.of(Phase.SPARSE_WARMUP).seconds == pytest.approx(15.0 * 2)  # steps
    assert estimate.of(Phase.WEIGHTS).seconds == pytest.approx(9.0)  # once per run
    assert estimate.of(Phase.DECODE).seconds == pytest.approx(20.0)  # per arm and pair


def test_the_flop_models_ratio_scales_where_it_has_the_phase_then_and_now():
    measured = _job({"timing": 30.0}, model={"timing": 20.0})
    estimate = estimate_job(
        KEY, WORK, {Phase.TIMING: 10.0}, [measured], flops_per_s=1e12, warm_cache=False
    )
    assert estimate.of(Phase.TIMING).seconds == pytest.approx(15.0)  # 30 x 10/20


def test_another_device_model_or_video_is_not_used_and_the_latest_wins():
    other = [
        _job({"timing": 1.0}, key=JobKey("tpu-v6e", 1, KEY.model, KEY.video), created_at=9.0),
        _job({"timing": 2.0}, key=JobKey("tpu-v5e", 1, KEY.model, (81, 480, 832)), created_at=9.0),
        _job({"timing": 3.0}, created_at=1.0),
        _job({"timing": 4.0}, created_at=2.0),
    ]
    estimate = estimate_job(KEY, WORK, {}, other, flops_per_s=1e12, warm_cache=False)
    assert estimate.of(Phase.TIMING).seconds == 4.0


def test_a_compile_reads_a_measurement_with_the_same_cache_state():
    cold = _job({"sparse compile": 30.0}, created_at=1.0)
    warm = _job({"sparse compile": 3.0}, created_at=2.0, cache_hits=5)
    jobs = [cold, warm]
    cold_estimate = estimate_job(KEY, WORK, {}, jobs, flops_per_s=1e12, warm_cache=False)
    warm_estimate = estimate_job(KEY, WORK, {}, jobs, flops_per_s=1e12, warm_cache=True)
    assert cold_estimate.of(Phase.SPARSE_COMPILE).seconds == 30.0
    assert warm_estimate.of(Phase.SPARSE_COMPILE).seconds == 3.0


def test_a_cpu_measurement_scales_by_the_hosts_matmul_rates():
    key = JobKey("cpu", 1, "tiny", (33, 192, 320))
    measured = MeasuredJob(key, WORK, {"timing": 10.0}, {}, 10.0, 1.0, 2e11)
    estimate = estimate_job(key, WORK, {}, [measured], flops_per_s=1e11, warm_cache=False)
    assert estimate.of(Phase.TIMING).seconds == pytest.approx(20.0)  # a host half as fast


def test_the_history_round_trips_and_skips_a_damaged_file(tmp_path):
    job = _job({"timing": 47.0, "weights": 9.0}, model={"timing": 40.0})
    record_job(tmp_path, job)
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"key": 1}))
    assert load_history([tmp_path, tmp_path / "absent"]) == [job]


def test_the_table_puts_measured_beside_estimate_with_the_unaccounted_rest():
    ticks = iter([0.0, 1.0, 3.0, 3.0, 7.0, 10.0])
    ledger = PhaseLedger(clock=lambda: next(ticks), memory=lambda: None)
    with ledger.timed(Phase.WEIGHTS):
        pass
    with ledger.timed(Phase.TIMING):
        pass
    times = ledger.snapshot()
    measured = _job({"timing": 8.0, "weights": 2.0})
    estimate = estimate_job(KEY, WORK, {}, [measured], flops_per_s=1e12, warm_cache=False)
    table = estimate.to_markdown(times)
    assert "| timing | 8.0 | 4.0 | 0.50 | measured |" in table
    assert "| unaccounted (no phase) | - | 4.0 | - | - |" in table
    assert "| **whole job** | 10.0 | 10.0 | 1.00 |" in table
