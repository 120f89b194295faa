"""How a search ends, with its trials' runs faked (no model runs): nothing slower than dense is
recommended, a Ctrl-C at any point leaves no RUNNING trial in Optuna's storage nor a RUNNING run
in MLflow, and a bug's ``KeyError``/``TypeError`` is a failure (4), not a refusal (2).

A Ctrl-C is noted at an exact point of the code, as the handler notes a real one, and acted on
at the search's next safe point: no timing, no signal delivery, so a busy machine changes
nothing."""

from __future__ import annotations

import json
import signal

import optuna
import pytest
from mlflow.tracking import MlflowClient

from evalharness import exit_codes
from evalharness.search import __main__ as search_main
from evalharness.search import run_search, study_run, trials
from evalharness.search.plan import SearchPlan
from evalharness.search.trials import TrialOutcome
from models import interruption
from tests.helpers.search_config import SEARCH, compose_cfg

GATE = "gate.min_psnr_db=30"


@pytest.fixture(autouse=True)
def quick_plan(monkeypatch):
    """The time plan without the run planner's compiles: every trial a second."""

    def plan(run_cfg, search, done, max_minutes):
        return SearchPlan(search.trials - done, done, 1 / 60, max_minutes, None)

    monkeypatch.setattr(study_run, "make_plan", plan)


def _measured(speedup: float, psnr: float = 40.0):
    def run_trial(cfg):
        return TrialOutcome(exit_codes.OK, {"speedup": speedup, "psnr_db_mean": psnr})

    return run_trial


def _study(tmp_path, name="s") -> optuna.Study:
    url = f"sqlite:///{tmp_path / 'outputs' / 'searches' / name / 'optuna.db'}"
    return optuna.load_study(study_name=name, storage=url)


def _cfg(tmp_path, *overrides):
    return compose_cfg(tmp_path, *SEARCH, "search.study_name=s", GATE, *overrides)


def test_trials_that_meet_the_gate_but_are_slower_than_dense_recommend_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(study_run, "run_trial", _measured(0.9))
    result = run_search(_cfg(tmp_path, "search.trials=2", "logger=none"))
    assert result.code == exit_codes.GATE_FAILED and result.answer.recommended is None
    assert "met every threshold, but none is faster than dense" in result.message
    assert not list((tmp_path / "outputs" / "searches").rglob("*.yaml"))


def test_a_trial_faster_than_dense_is_recommended(tmp_path, monkeypatch):
    monkeypatch.setattr(study_run, "run_trial", _measured(1.2))
    result = run_search(_cfg(tmp_path, "search.trials=1", "logger=none"))
    assert result.code == exit_codes.OK and result.answer.schedule_path.is_file()


def _signal_after(real):
    """``real``, then a Ctrl-C noted exactly as the installed SIGINT handler notes one
    (``models.interruption.request``): the search must stop at its next safe point."""

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        interruption.request(signal.SIGINT)
        return out

    return wrapped


# Where the Ctrl-C lands: inside Optuna's ask() once the trial exists in the storage, between
# ask() and the trial's run, inside the study's tell(), in the answer's files after a trial,
# and inside the MLflow parent run's creation.
PLACES = {
    "in ask": (optuna.Study, "ask"),
    "between ask and the run": (study_run, "suggest"),
    "in tell": (optuna.Study, "tell"),
    "writing the answer": (study_run, "write_answer"),
    "creating the parent run": (MlflowClient, "create_run"),
}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One output root whose MLflow store is created once (seconds) for every study here."""
    root = tmp_path_factory.mktemp("tracked")
    (root / "outputs").mkdir()
    client = MlflowClient(f"sqlite:///{root / 'outputs' / 'mlflow.db'}")
    client.search_experiments()
    return root, client


@pytest.mark.parametrize("place", PLACES)
def test_ctrl_c_anywhere_leaves_nothing_running(tracked, monkeypatch, place):
    root, client = tracked
    study_name = place.replace(" ", "-")
    monkeypatch.setattr(study_run, "run_trial", _measured(1.2))
    owner, name = PLACES[place]
    monkeypatch.setattr(owner, name, _signal_after(getattr(owner, name)))
    args = [*SEARCH, f"search.study_name={study_name}", GATE, "search.trials=2"]
    with pytest.raises(KeyboardInterrupt):
        run_search(compose_cfg(root, *args))
    study = _study(root, study_name)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    for trial in study.get_trials(states=(optuna.trial.TrialState.FAIL,)):
        assert trial.user_attrs["interrupted"]  # a resume runs its knobs again
    experiment = client.get_experiment_by_name("evalharness")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.info.run_name == study_name]
    assert parent.info.status == "KILLED"
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]


def _signals_after(real, count: int):
    """``real``, then ``count`` Ctrl-Cs noted as the installed handler notes them."""

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        for _ in range(count):
            interruption.request(signal.SIGINT)
        return out

    return wrapped


@pytest.mark.parametrize(
    ("in_ask", "in_the_cleanup"),
    [(2, 0), (1, 1)],
    ids=["twice-while-the-trial-is-asked", "again-while-it-is-failed"],
)
def test_ctrl_c_pressed_twice_still_fails_the_trial_and_writes_the_answer(
    tmp_path, monkeypatch, in_ask, in_the_cleanup
):
    """Both signals inside the deferred block of ``ask()`` (acted on together when it ends), or
    one there and one more inside the deferred block that fails the trial: the search ends
    interrupted, the trial is failed as interrupted, and the answer's files are written."""
    monkeypatch.setattr(study_run, "run_trial", _measured(1.2))
    monkeypatch.setattr(optuna.Study, "ask", _signals_after(optuna.Study.ask, in_ask))
    monkeypatch.setattr(optuna.Study, "tell", _signals_after(optuna.Study.tell, in_the_cleanup))
    with pytest.raises(KeyboardInterrupt):
        run_search(_cfg(tmp_path, "search.trials=1", "logger=none"))
    (trial,) = _study(tmp_path).trials
    assert trial.state.name == "FAIL" and trial.user_attrs["interrupted"]
    folder = tmp_path / "outputs" / "searches" / "s"
    assert json.loads((folder / "summary.json").read_text())["trials"] == 0
    assert (folder / "front.md").is_file() and (folder / "front.csv").is_file()


@pytest.mark.parametrize("bug", [KeyError("metrics"), TypeError("unsupported operand")])
def test_a_bug_in_a_trial_fails_it_and_the_search_exits_4(tmp_path, monkeypatch, bug):
    def buggy(cfg):
        raise bug

    monkeypatch.setattr(trials, "run", buggy)  # raised where a run's config is checked
    result = run_search(_cfg(tmp_path, "search.trials=1", "logger=none"))
    assert result.code == exit_codes.FAILED
    (trial,) = _study(tmp_path).trials
    assert trial.state.name == "FAIL" and type(bug).__name__ in trial.user_attrs["error"]
    assert trial.user_attrs["exit_code"] == exit_codes.FAILED


def test_a_bad_setting_in_a_trial_is_still_a_refusal(tmp_path, monkeypatch):
    def refused(cfg):
        raise ValueError("kernel.block_q=7 is not a multiple of 8")

    monkeypatch.setattr(trials, "run", refused)
    result = run_search(_cfg(tmp_path, "search.trials=1", "logger=none"))
    assert result.code == exit_codes.REFUSED


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (KeyError("speedup"), exit_codes.FAILED),
        (TypeError("bad operand"), exit_codes.FAILED),
        (ValueError("search.trials=0: use at least 1"), exit_codes.REFUSED),
    ],
)
def test_the_search_command_exits_4_on_a_bug_and_2_on_a_bad_setting(
    tmp_path, monkeypatch, error, code
):
    def raising(cfg):
        raise error

    monkeypatch.setattr(search_main, "run_search", raising)
    monkeypatch.setattr(search_main, "_endings", [])
    search_main.main(_cfg(tmp_path, "logger=none"))  # Hydra passes a given config straight on
    ((ended, message),) = search_main._endings
    assert ended == code and message
