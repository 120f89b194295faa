"""Resuming a study, with its trials' runs faked (no model runs): a trial a lost process left
RUNNING is failed and its knobs run exactly once more; the sampler does not propose its seed's
first point again; a resume with other run settings or bounds, or of a study another live process
runs, is refused naming what differs; a refused search creates no study a resume could pick
up."""

from __future__ import annotations

import dataclasses
import socket
import subprocess

import optuna
import pytest

from evalharness import exit_codes
from evalharness.config import EvalConfig, to_config
from evalharness.evidence import run_status
from evalharness.refusal import PreflightRefusal
from evalharness.search import __main__ as search_main
from evalharness.search import resume, run_search, study_run
from evalharness.search.plan import SearchPlan
from evalharness.search.settings import split_search
from evalharness.search.space import make_sampler, suggest
from evalharness.search.trials import TrialOutcome
from tests.helpers.search_config import SEARCH, compose_cfg

# SEARCH's grid widened to 2 x 2 x 21 points, so that distinct draws are distinct knobs.
WIDE = [*SEARCH, "search.first_layers_fp.high=0.2", "search.first_layers_fp.step=0.01"]
RUN = ["search.study_name=s", "logger=none"]
# Every run setting, stated here apart from resume.py's classification: those a trial's numbers
# depend on (what runs, on what video, prompts and noise, how it samples, in what dtype, on which
# kernels and devices, how often it is timed against which dense controls, and the gate its
# standing is judged by), which a resume must not change; and those it may.
MEASURED_BY = {
    "model",
    "resolution",
    "kernel",
    "parallel",
    "gate",
    "prompt",
    "prompts",
    "prompt_filter",
    "negative_prompt",
    "seed",
    "seeds",
    "steps",
    "sampler",
    "guidance_scale",
    "guidance_passes",
    "dtype",
    "warm_runs",
    "noise_floor",
    "reuse_dense_timing",
    "negative_control",
}
MAY_CHANGE = {
    "schedule",  # each trial sets its own
    "routing_stats",  # each trial sets it from search.routing_stats
    "logger",
    "max_minutes",
    "output_root",
    "cache_dir",
    "compile_cache",
    "progress",
    "save_latents",
    "fps",
    "crf",
    "dry_run",
    "target",
    "chip_compile",
    "chip_compile_phases",
}


@pytest.fixture(autouse=True)
def quick_plan(monkeypatch):
    """The time plan without the run planner's compiles: every trial a second."""

    def plan(run_cfg, search, done, max_minutes):
        return SearchPlan(search.trials - done, done, 1 / 60, max_minutes, None)

    monkeypatch.setattr(study_run, "make_plan", plan)


@pytest.fixture
def ran(monkeypatch) -> list[dict]:
    """The knobs of every faked trial's run, in order; each run measures speedup 1.2."""
    knobs: list[dict] = []

    def run_trial(cfg):
        schedule = dict(cfg.schedule)
        knobs.append({k: schedule[k] for k in ("density", "first_times_fp", "first_layers_fp")})
        return TrialOutcome(exit_codes.OK, {"speedup": 1.2, "psnr_db_mean": 40.0})

    monkeypatch.setattr(study_run, "run_trial", run_trial)
    return knobs


def _search(tmp_path, *overrides):
    return run_search(compose_cfg(tmp_path, *WIDE, *RUN, *overrides))


def _study(tmp_path, name="s") -> optuna.Study:
    url = f"sqlite:///{tmp_path / 'outputs' / 'searches' / name / 'optuna.db'}"
    return optuna.load_study(study_name=name, storage=url)


def _knobs(trial) -> tuple:
    return tuple(sorted(trial.params.items()))


def _leave_running(tmp_path, owner: dict) -> optuna.trial.FrozenTrial:
    """What a search SIGKILLed in its trial leaves: the trial asked, its knobs drawn, never told,
    and the study owned by a process that is gone."""
    study = _study(tmp_path)
    search, _ = split_search(compose_cfg(tmp_path, *WIDE, *RUN))
    study.sampler = make_sampler(search, 100)  # a point no sampler of these tests draws first
    trial = study.ask()
    suggest(trial, search)
    study.set_user_attr(resume.OWNER_ATTR, owner)
    return study.trials[trial.number]


def _gone() -> dict:
    """A stamp of a process that has ended: this pid, but another start time."""
    return {**run_status.process_stamp(), "pid_start": "0"}


def test_a_trial_left_running_runs_once_more_and_the_sampler_moves_on(tmp_path, ran):
    _search(tmp_path, "search.trials=1")
    lost = _leave_running(tmp_path, _gone())

    _search(tmp_path, "search.trials=2", "search.resume=true")
    _search(tmp_path, "search.trials=3", "search.resume=true")

    trials = _study(tmp_path).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert trials[1].user_attrs["interrupted"] and "lost" in trials[1].user_attrs["error"]
    assert _knobs(trials[2]) == _knobs(lost)  # the lost trial's knobs, run once more
    measured = [_knobs(t) for t in trials if t.state.name == "COMPLETE"]
    assert len(set(measured)) == len(measured) == 3  # nothing drawn twice
    assert len(ran) == 3  # the second resume ran one new point, not the lost one again


def test_a_resumed_sampler_does_not_draw_its_seeds_first_point_again(tmp_path):
    search, _ = split_search(compose_cfg(tmp_path, *WIDE))
    first = []
    for offset in (0, 0, 1, 2):
        study = optuna.create_study(
            directions=["maximize"] * 2, sampler=make_sampler(search, offset)
        )
        first.append(suggest(study.ask(), search))
    assert first[0] == first[1]  # a seed proposes the same point: what the offset moves past
    assert first[0] != first[2] and first[0] != first[3]


def test_recovering_twice_queues_a_lost_trials_knobs_once(tmp_path, ran):
    _search(tmp_path, "search.trials=1")
    lost = _leave_running(tmp_path, _gone())
    study = _study(tmp_path)
    assert resume.recover_trials(study) == ([lost.number], [lost.number])
    assert resume.recover_trials(study) == ([], [])
    study.set_user_attr(resume.REQUEUED_ATTR, [])  # as if killed before the list was written
    assert resume.recover_trials(study) == ([], [])  # its knobs wait in the queue already
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.system_attrs["fixed_params"] for t in waiting] == [lost.params]


def test_a_study_another_live_process_runs_is_not_resumed(tmp_path, ran):
    _search(tmp_path, "search.trials=1")
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            stamp = {"pid": other.pid, "pid_start": run_status._process_start(other.pid)}
            _leave_running(tmp_path, {**stamp, "host": socket.gethostname()})
            with pytest.raises(PreflightRefusal, match=f"being run by process {other.pid}"):
                _search(tmp_path, "search.trials=2", "search.resume=true")
            assert _study(tmp_path).trials[1].state.name == "RUNNING"  # left as it was
        finally:
            other.kill()
    _search(tmp_path, "search.trials=2", "search.resume=true")  # gone now: taken as lost
    assert [t.state.name for t in _study(tmp_path).trials] == ["COMPLETE", "FAIL", "COMPLETE"]


def test_every_run_setting_is_classified_as_the_measurement_needs():
    settings = {f.name for f in dataclasses.fields(EvalConfig)}
    # A setting added to the run must be added to one of the lists here, too.
    assert MEASURED_BY | MAY_CHANGE == settings and not MEASURED_BY & MAY_CHANGE
    wrong = sorted(resume.COMPARED ^ MEASURED_BY) + sorted(resume.NOT_COMPARED ^ MAY_CHANGE)
    assert not wrong, f"resume.py classifies {wrong} otherwise"


def test_the_compared_settings_hold_every_measurement_setting_and_no_other(tmp_path):
    search, run_cfg = split_search(compose_cfg(tmp_path, *WIDE, *RUN))
    compared = resume.comparable_settings(to_config(run_cfg), search, "mean")
    tops = {key.split(".")[0] for key in compared}
    assert not tops ^ (MEASURED_BY | {"search"}), sorted(tops ^ (MEASURED_BY | {"search"}))
    assert compared["seed"] == 42 and compared["warm_runs"] == 1


def test_a_setting_classified_twice_or_not_at_all_is_a_bug_named(tmp_path, monkeypatch):
    search, run_cfg = split_search(compose_cfg(tmp_path, *WIDE, *RUN))
    base = to_config(run_cfg)
    monkeypatch.setattr(resume, "NOT_COMPARED", resume.NOT_COMPARED | {"seed"})
    with pytest.raises(RuntimeError, match=r"\['seed'\] are not in exactly one"):
        resume.comparable_settings(base, search, "mean")
    monkeypatch.setattr(resume, "NOT_COMPARED", resume.NOT_COMPARED - {"seed", "fps"})
    with pytest.raises(RuntimeError, match=r"\['fps'\] are not in exactly one"):
        resume.comparable_settings(base, search, "mean")


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("steps=3", "steps: 2 in the study vs 3 now"),
        ("search.density.high=0.7", "search.density.high: 0.5 in the study vs 0.7 now"),
        ("search.statistic=worst", "search.statistic: mean in the study vs worst now"),
        ("gate.min_psnr_db=25", "gate.min_psnr_db: None in the study vs 25.0 now"),
        ("seed=7", "seed: 42 in the study vs 7 now"),
        ("warm_runs=2", "warm_runs: 1 in the study vs 2 now"),
    ],
)
def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path, ran, override, named):
    _search(tmp_path, "search.trials=1")
    before = _study(tmp_path).user_attrs
    with pytest.raises(PreflightRefusal, match="measured with other settings") as refused:
        _search(tmp_path, "search.trials=2", "search.resume=true", override)
    assert named in str(refused.value) and "another search.study_name" in str(refused.value)
    study = _study(tmp_path)
    assert len(study.trials) == 1 and study.user_attrs == before and len(ran) == 1


def test_a_resume_may_change_what_does_not_change_a_measurement(tmp_path, ran):
    _search(tmp_path, "search.trials=1")
    # More trials, more time, another sampler seed, another output of the videos.
    more = ["search.trials=2", "max_minutes=99", "search.sampler_seed=7", "crf=20"]
    result = _search(tmp_path, *more, "search.resume=true")
    assert result.code == exit_codes.OK and len(ran) == 2


def test_the_refused_search_command_exits_2_naming_the_difference(tmp_path, ran, monkeypatch):
    _search(tmp_path, "search.trials=1")
    monkeypatch.setattr(search_main, "_endings", [])
    search_main.main(compose_cfg(tmp_path, *WIDE, *RUN, "search.resume=true", "steps=3"))
    ((code, message),) = search_main._endings
    assert code == exit_codes.REFUSED and "steps: 2 in the study vs 3 now" in message


@pytest.mark.parametrize(
    "refused",
    [
        ["search.trials=200", "max_minutes=1"],  # the plan: 200 s over one minute
        ["search.reference=[nosuch]"],  # a named schedule that does not exist
    ],
)
def test_a_refused_search_creates_no_study_a_resume_could_pick_up(tmp_path, ran, refused):
    with pytest.raises((PreflightRefusal, FileNotFoundError)):
        _search(tmp_path, *refused)
    assert not (tmp_path / "outputs" / "searches").exists()
    with pytest.raises(PreflightRefusal, match="no study 's'"):
        _search(tmp_path, "search.resume=true")
    with pytest.raises(PreflightRefusal, match="no study under"):
        run_search(compose_cfg(tmp_path, *WIDE, "logger=none", "search.resume=true"))
    assert not ran and not (tmp_path / "outputs" / "searches").exists()
