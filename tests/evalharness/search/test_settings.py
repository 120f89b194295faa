"""The search section (composed with Hydra like the CLI), bad bounds refused with the fix, the
recommended schedule's file (written, then composed by Hydra as a named schedule), the plan, and a
``search.*`` value Hydra would refuse given an ``error:`` line before Hydra runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from evalharness import exit_codes
from evalharness.config import register_configs, to_config
from evalharness.search import __main__ as search_main
from evalharness.search import (
    register_search_configs,
    schedule_text,
    split_search,
    unknown_search_key,
    write_schedule,
)
from evalharness.search.plan import SearchPlan
from evalharness.search.space import reference_trials
from tests.helpers.harness_config import CONF_DIR

KNOBS = {"density": 0.3, "first_times_fp": 0.1, "first_layers_fp": 0.0}
KNOBS |= {"routing_samples": 64, "variant": "b3"}


def compose_search(*overrides: str, name: str = "search"):
    register_configs()
    register_search_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(name, overrides=list(overrides))


def test_the_search_config_is_a_run_config_plus_search():
    cfg = compose_search("search.trials=3", "search.density.low=0.2", "schedule=aggressive")
    search, run_cfg = split_search(cfg)
    assert search.trials == 3 and search.density.low == 0.2 and search.density.high == 0.6
    assert "search" not in run_cfg
    assert to_config(run_cfg).schedule.name == "aggressive"  # the run's own checks accept it


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("search.density.low=0", "search.density"),
        ("search.first_times_fp.high=0.33", "not a multiple of step"),
        ("search.variant=[b9]", "search.variant"),
        ("search.trials=0", "search.trials=0 must be >= 1"),
        ("search.study_name=a/b", "plain name"),
        ("search.density.step=nan", "search.density.step=nan is not a number"),
        ("search.density.high=inf", "search.density.high=inf is infinite"),
        ("search.time_budget_minutes=nan", "search.time_budget_minutes=nan is not a number"),
        ("search.time_budget_minutes=-1", "search.time_budget_minutes=-1 is negative"),
    ],
)
def test_bad_bounds_are_refused_with_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        split_search(compose_search(override))


def test_a_misspelt_search_key_names_the_closest():
    assert "did you mean search.trials" in unknown_search_key("search.trails")
    assert "did you mean search.density.high" in unknown_search_key("search.density.hihg")
    assert unknown_search_key("search.density.low") is None


def test_references_outside_the_bounds_are_skipped():
    search, _ = split_search(compose_search("search.density.low=0.3"))
    names = [name for name, _ in reference_trials(search)]
    assert names == ["conservative", "balanced"]  # aggressive keeps 25%


def test_the_written_schedule_composes_as_a_named_schedule(tmp_path: Path):
    path = write_schedule(tmp_path, "searched-x", KNOBS, "found by a test")
    assert path == tmp_path / "conf" / "schedule" / "searched-x.yaml"
    assert path.read_text().startswith("# found by a test\ndefaults:\n  - schedule_schema\n")
    cfg = compose_search(
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "schedule=searched-x", name="config"
    )
    schedule = to_config(cfg).schedule
    assert (schedule.name, schedule.density, schedule.routing_samples) == ("searched-x", 0.3, 64)


def test_a_schedule_the_run_would_refuse_is_not_written():
    with pytest.raises(ValueError, match="density"):
        schedule_text("bad", {**KNOBS, "density": 0.0}, "")
    with pytest.raises(ValueError, match="lacks"):
        schedule_text("bad", {"density": 0.3}, "")


def test_the_plan_states_trials_time_and_verdict():
    plan = SearchPlan(trials=12, done=0, trial_minutes=6.0, max_minutes=30, budget_minutes=None)
    assert not plan.within and plan.total_minutes == 72
    text = "\n".join(plan.lines())
    assert "Trials: 12 to run" in text and "6.0 min" in text and "OVER max_minutes" in text
    assert "search.trials=5" in plan.refusal()
    budgeted = SearchPlan(12, 0, 6.0, 30, budget_minutes=20)
    assert budgeted.total_minutes == 26 and budgeted.within


def test_a_density_floor_narrower_than_a_tile_is_refused_before_any_trial():
    """At the cpu preset (2,160 tokens, 128-token tiles) density 0.15 gives a 95-token band: every
    trial drawing it would be refused, so the search refuses the range and names 0.2."""
    from evalharness.config import to_config
    from evalharness.search.study_run import check_density_floor

    search, run_cfg = split_search(compose_search())
    base = to_config(run_cfg)
    check_density_floor(search, base)  # the default range runs here
    narrow, _ = split_search(compose_search("search.density.low=0.15"))
    with pytest.raises(ValueError, match=r"search.density.low=0.15: .*set search.density.low=0.2"):
        check_density_floor(narrow, base)
    hopeless, _ = split_search(compose_search("search.density.low=0.05", "search.density.high=0.1"))
    with pytest.raises(ValueError, match="no value on its grid can run here"):
        check_density_floor(hopeless, base)


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("search.statistic=median", "expected one of [mean, lcb, worst]"),
        ("search.trials=many", "could not be converted to Integer"),
        ("search.density.step=fine", "could not be converted to Float"),
    ],
)
def test_a_search_value_hydra_would_refuse_gets_an_error_line(capsys, arg, said):
    with pytest.raises(SystemExit) as ended:
        search_main.cli([arg])
    assert ended.value.code == exit_codes.REFUSED
    (line,) = capsys.readouterr().err.strip().splitlines()
    key = arg.split("=")[0]
    assert line.startswith(f"error: {key}: ") and said in line and "nothing was run" in line
