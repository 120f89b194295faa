"""The search's time plan asks the run planner: a trial's estimate is the planner's whole run of the
trial's config (the first) less what later trials reuse (compiling the dense loops, decoding the
dense videos), each counted once; the planner counts what a run does on a CPU (compiling, the
slower second control, the routing-recording run only when it runs); the revised total."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from evalharness.admission import admit, reusable_seconds
from evalharness.assembly import platform_choices
from evalharness.config import register_configs, to_config
from evalharness.estimates import cpu_calibration
from evalharness.search import register_search_configs, split_search
from evalharness.search.plan import (
    SearchPlan,
    make_plan,
    slowest_knobs,
    trial_minutes,
    trial_timing,
)
from evalharness.search.trials import trial_config
from tests.helpers.harness_config import CONF_DIR

FLOPS = 50e9  # a fixed probe, so that two plans of one config agree


@pytest.fixture(autouse=True)
def _fixed_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "evalharness.admission.decision.measure_matmul_flops", lambda *a, **k: FLOPS
    )


def _search(tmp_path: Path, *overrides: str):
    register_configs()
    register_search_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            "search",
            overrides=[
                f"output_root={tmp_path / 'out'}",
                "prompts=smoke",
                "seeds=[0,1]",
                "max_minutes=1000",
                *overrides,
            ],
        )
    return split_search(cfg)


def _planned(run_cfg, search, *, routing_stats: bool):
    """The run planner's time plan of the slowest corner, asked directly."""
    cfg = trial_config(run_cfg, "x", slowest_knobs(search), {}, routing_stats=routing_stats)
    return admit(platform_choices.resolve(to_config(cfg))).sizing.timing


def test_a_trial_is_the_run_planners_run_less_what_later_trials_reuse(tmp_path: Path):
    search, run_cfg = _search(tmp_path)
    timing = _planned(run_cfg, search, routing_stats=False)
    first, later = trial_minutes(run_cfg, search)
    assert first == pytest.approx(timing.total_minutes)  # one source of truth
    once = timing.once
    # The reused parts, each once: the dense loops' compiles (less loading them from the
    # persistent cache), the VAE decoder's, the dense and noise-floor decodes, the text encoding.
    compiled = once["compile"]
    expected = (
        compiled["dense"]
        + compiled["noise_floor"]
        + compiled["shared"]
        - 3 * cpu_calibration.CACHED_LOAD_S
        + once["VAE decode"]["dense"]
        + once["VAE decode"]["noise_floor"]
        + once["text encoding"]["shared"]
    )
    assert reusable_seconds(timing) == pytest.approx(expected)
    assert later == pytest.approx(first - expected / 60)
    # Not reused: the sparse arm's compile and decode, every arm's timed loops and videos.
    sparse_once = sum(row.get("sparse", 0.0) for row in once.values())
    loops = sum(
        timing.pairs * timing.steps * timing.runs[a] * timing.step_seconds[a] for a in timing.runs
    )
    assert later * 60 >= loops + sparse_once
    plan = make_plan(run_cfg, search, done=0, max_minutes=1000)
    assert plan.first_minutes == pytest.approx(first) and plan.trial_minutes == pytest.approx(later)
    assert plan.total_minutes == pytest.approx(first + 11 * later)
    resumed = make_plan(run_cfg, search, done=4, max_minutes=1000)  # the caches are on disk
    assert resumed.total_minutes == pytest.approx(8 * later)


def test_the_run_planner_counts_what_a_cpu_run_does(tmp_path: Path):
    search, run_cfg = _search(tmp_path)
    with_stats = _planned(run_cfg, search, routing_stats=True)
    without = _planned(run_cfg, search, routing_stats=False)
    # The routing is recorded by the sparse arm's warm-up run: no run or compile more with it.
    runs = to_config(run_cfg).warm_runs + 1
    assert with_stats.runs == without.runs == {"dense": runs, "sparse": runs, "noise_floor": runs}
    assert with_stats.once["compile"] == without.once["compile"]
    assert with_stats.total_minutes == pytest.approx(without.total_minutes)
    # The second dense control (dot_product_attention on a CPU) runs slower than the dense arm.
    step = without.step_seconds
    factor = cpu_calibration.SLOW_CONTROL_FACTOR
    assert step["noise_floor"] == pytest.approx(factor * step["dense"])
    assert cpu_calibration.OVERHEAD_ROW in without.to_markdown()
    assert "compile" in without.to_markdown()
    # The search asks with its own routing_stats setting (off by default).
    assert not search.routing_stats
    assert trial_timing(run_cfg, search).runs == without.runs


def test_the_plan_states_first_and_later_trials_and_revises():
    plan = SearchPlan(
        12, 0, trial_minutes=5.0, max_minutes=60, budget_minutes=None, first_minutes=8
    )
    assert plan.total_minutes == 8 + 11 * 5 and not plan.within
    text = "\n".join(plan.lines())
    assert "8.0 min for the first" in text and "5.0 min for each later one" in text
    assert "search.trials=11" in plan.refusal()  # 8 + 10 x 5 = 58 fits in 60
    assert plan.estimate_of(0) == 8 and plan.estimate_of(3) == 5
    # Trials took twice their estimates: the rest is revised at that pace.
    assert plan.revised_minutes([(16.0, 8.0), (10.0, 5.0)], left=4) == pytest.approx(4 * 5 * 2)
    assert plan.revised_minutes([], left=2) == 10 and plan.revised_minutes([(9, 8)], left=0) == 0
    budgeted = SearchPlan(12, 0, 5.0, 60, budget_minutes=20, first_minutes=8)
    assert budgeted.total_minutes == 28 and budgeted.within
    resumed = SearchPlan(3, 9, 5.0, 60, None, first_minutes=8)
    assert resumed.cold_minutes == 5 and resumed.total_minutes == 15


def test_the_cpu_factors_apply_at_the_rate_they_were_measured_against(monkeypatch):
    from evalharness.estimates.targets import cpu_target

    probed = cpu_target({"float32": 300e9, "bfloat16": 30e9})
    monkeypatch.setattr(cpu_calibration, "host_cpu", lambda: cpu_calibration.CALIBRATED_HOST)
    target, source = cpu_calibration.calibrated_target(probed)
    total = target.peak_flops["float32"] * target.devices
    assert total == pytest.approx(cpu_calibration.REFERENCE_FLOPS) and "probe read 300" in source
    assert target.peak_flops["bfloat16"] / target.peak_flops["float32"] == pytest.approx(0.1)
    monkeypatch.setattr(cpu_calibration, "host_cpu", lambda: ("another CPU", 64))
    assert cpu_calibration.calibrated_target(probed) == (
        probed,
        "this host's probe, 300 GFLOP/s float32",
    )
