"""``run_search(cfg)``: the study from its first trial to its answer, as a plain function the CLI
and the tests call. Every setting is checked and the time plan made before any trial; each trial
(ask, run, tell) is committed to Optuna's storage and the answer's files rewritten before the next
starts. Ctrl-C or SIGTERM fails the running trial as interrupted (a resume runs it again), closes
the parent run KILLED and goes on up as the exit code says.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from evalharness import compile_cache, exit_codes
from evalharness.config import EvalConfig, to_config
from evalharness.evidence import code_version
from evalharness.exit_codes import Terminated, signals_deferred, stop_if_signalled
from evalharness.metric_names import Metric
from evalharness.refusal import PreflightRefusal
from evalharness.search import resume, storage
from evalharness.search.front import no_recommendation_message
from evalharness.search.objectives import objective_values, readings, thresholds
from evalharness.search.parent import NoParent, ParentRun, open_parent
from evalharness.search.plan import SearchPlan, make_plan
from evalharness.search.resume import ERROR_ATTR, INTERRUPTED_ATTR, finished
from evalharness.search.settings import SearchConfig, check_density_floor, search_dict, split_search
from evalharness.search.space import enqueue_references, make_sampler, reference_trials, suggest
from evalharness.search.summary import (
    REFERENCE_ATTR,
    Answer,
    points_from_study,
    record_point,
    write_answer,
)
from evalharness.search.trials import (
    PARENT_TAG,
    SEARCH_TAG,
    TRIAL_TAG,
    TrialOutcome,
    run_trial,
    trial_config,
)
from evalharness.tracking import check_tracking, redacted, redacted_values

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

CODE_ATTR = "exit_code"
PARENT_ATTR = "mlflow_parent_run_id"


@dataclass(frozen=True)
class SearchResult:
    """How the search ended.

    Attributes:
        answer: the front, the recommendation and their files.
        code: the exit code: 0 a trial met every threshold; 1 none did (``message`` says the best
            value each threshold reached); 2 a trial was refused, 4 a trial failed while running
            (the other trials ran; the worst code wins, as in a multirun).
        message: the closing line.
    """

    answer: Answer
    code: int
    message: str
    psnr_label: str = "psnr_db_mean"
    schedule_name: str = ""


@dataclass
class Search:
    """One invocation of a search, filled in as it goes.

    Attributes:
        search: the search section.
        run_cfg: the run's config without ``search``.
        base: ``run_cfg`` checked as a run checks it (:func:`to_config`).
        name: the study's name.
        folder: the study's folder.
        statistic: the PSNR statistic (``mean``, ``lcb``, ``worst``).
        limits: the gate's thresholds by metric.
        comparable: what the trials must share (``resume.comparable_settings``): recorded on a
            new study, compared on a resume.
        references: the named schedules queued first on a new study, as (name, knobs).
        codes: each trial's exit code in this invocation.
        stopped: why the search stopped before ``search.trials`` (its revised time over
            ``max_minutes``), None when it did not.
        current: the trial asked and not yet told (None between trials).
    """

    search: SearchConfig
    run_cfg: DictConfig
    base: EvalConfig
    name: str
    folder: Path
    statistic: str
    limits: dict[str, float]
    comparable: dict[str, Any]
    references: list[tuple[str, dict[str, Any]]]
    codes: list[int] = field(default_factory=list)
    stopped: str | None = None
    current: optuna.Trial | None = None

    @property
    def psnr_label(self) -> str:
        """The PSNR objective's metric, e.g. ``psnr_db_lcb``."""
        return f"{Metric.PSNR_DB}_{self.statistic}"

    @property
    def schedule_name(self) -> str:
        """The recommended schedule's name."""
        return self.search.schedule_name or f"searched-{self.name}"

    def say(self, text: str) -> None:
        """Prints one progress line, named by the study."""
        print(f"search {self.name}: {text}", flush=True)


def prepare(cfg: DictConfig | dict) -> Search:
    """Checks the search section and the run's config; names the study.

    Raises:
        ValueError: a bad search or run setting (nothing was run).
        FileNotFoundError: a named schedule in ``search.reference`` that does not exist.
        PreflightRefusal: a resume with nothing to resume.
    """
    search, run_cfg = split_search(cfg)
    base = to_config(run_cfg)  # every run setting checked as a run would, before any trial
    check_density_floor(search, base)
    name = storage.study_name_for(search.study_name, base.output_root, search.resume)
    statistic = str(search.statistic or base.gate.on)
    folder = storage.searches_root(base.output_root) / name
    comparable = resume.comparable_settings(base, search, statistic)
    references = [] if search.resume else reference_trials(search)
    limits = thresholds(base.gate)
    return Search(search, run_cfg, base, name, folder, statistic, limits, comparable, references)


def dry_run_search(cfg: DictConfig | dict) -> tuple[int, str]:
    """The plan, printed before anything runs: 0 within ``max_minutes``, 3 over it."""
    s = prepare(cfg)
    done = 0
    if s.search.resume:
        url = storage.storage_url(s.search.storage, s.base.logger.tracking_uri, s.folder)
        study = storage.load_study(s.name, url)
        resume.check_resumable(study, s.comparable)
        done = finished(study)
    plan = make_plan(s.run_cfg, s.search, done, s.base.max_minutes)
    lines = [f"# Search plan: study {s.name}", "", *plan.lines()]
    return (exit_codes.OK if plan.within else exit_codes.OVER_TIME), "\n".join(lines)


def run_search(cfg: DictConfig | dict) -> SearchResult:
    """Runs the search and returns how it ended (:class:`SearchResult`).

    Raises:
        PreflightRefusal: over ``max_minutes``, a taken study name, unusable storage (exit 2).
        ValueError: a bad setting (exit 2).
        KeyboardInterrupt, Terminated: interrupted; the study keeps its finished trials.
    """
    s = prepare(cfg)
    logger, output_root = s.base.logger, Path(s.base.output_root)
    check_tracking(logger.kind, logger.tracking_uri, logger.experiment_name, output_root)
    url = storage.storage_url(s.search.storage, logger.tracking_uri, s.folder)
    study, plan = _open_study(s, url)
    shown = redacted(url.split("?")[0])
    print("\n".join([f"search {s.name} (storage {shown})", *plan.lines()]), flush=True)
    # The dense loops every trial shares are compiled once, by the first trial to need them.
    compile_cache.enable(s.base.cache_dir, on=s.base.compile_cache)
    # The trials run the code imported now: hashing it now (once per process) keeps edits to
    # the working tree meanwhile out of every trial's dense-arm cache key.
    code_version()
    parent = open_parent(logger.kind, logger.tracking_uri, logger.experiment_name, output_root)
    try:
        parent.start(s.name, study.user_attrs.get(PARENT_ATTR))
        if parent.run_id is not None:
            study.set_user_attr(PARENT_ATTR, parent.run_id)
        _record_start(s, study, parent, plan, shown)
        _trials(s, study, parent, plan, time.perf_counter())
        answer = _answer(s, study, parent)
        with signals_deferred():
            parent.finish("FINISHED")
    except BaseException as err:
        _close_on_error(s, study, parent, err)
        raise
    return _verdict(s, answer)


def _open_study(s: Search, url: str) -> tuple[optuna.Study, SearchPlan]:
    """The study and its plan, every refusal (a taken or missing name, a resume with other
    settings or of a study another process runs, a plan over ``max_minutes``) before anything is
    created or changed; then a new study is created, or a resumed one takes back its lost trials
    (``resume.recover_trials``) and a sampler seeded past the points it drew."""
    if s.search.resume:
        study = storage.load_study(s.name, url)
        resume.check_resumable(study, s.comparable)
        done = finished(study)
    else:
        storage.refuse_taken(s.name, url)
        study, done = None, 0
    plan = make_plan(s.run_cfg, s.search, done, s.base.max_minutes)
    if not plan.within:
        raise PreflightRefusal(f"search {s.name}: {plan.refusal()}")
    if study is None:
        s.folder.mkdir(parents=True, exist_ok=True)
        study = storage.create_study(s.name, url, make_sampler(s.search))
    else:
        study.sampler = make_sampler(s.search, resume.sampler_offset(study))
    resume.claim(study, s.comparable)
    return study, plan


def _record_start(
    s: Search, study: optuna.Study, parent: ParentRun | NoParent, plan: SearchPlan, shown: str
) -> None:
    """``search.json`` (settings, storage ``shown`` without its password, parent run), the
    parent's params and tags, and the named schedules queued on a fresh study, or interrupted
    trials queued again on a resume."""
    settings = search_dict(s.search)
    info = {
        "study_name": s.name,
        "storage": shown,
        "mlflow_parent_run_id": parent.run_id,
        "tracking_uri": parent.tracking_uri,
        "psnr_metric": s.psnr_label,
        "thresholds": s.limits,
        "search": redacted_values(settings),  # an explicit storage's password
        "estimated_trial_minutes": plan.trial_minutes,
    }
    (s.folder / "search.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    params = {f"search.{k}": v for k, v in settings.items()}
    params.update({"study_name": s.name, "psnr_metric": s.psnr_label})
    parent.log(params, {"estimated_trial_minutes": plan.trial_minutes})
    parent.set_tags({SEARCH_TAG: s.name, "search_folder": str(s.folder.resolve())})
    if not s.search.resume:
        queued = enqueue_references(study, s.references)
        log.info("reference schedules queued first: %s", ", ".join(queued) or "none")
    else:
        lost, requeued = resume.recover_trials(study)
        if lost or requeued:
            s.say(
                f"trial(s) {lost or 'none'} left running by a lost process marked failed; the "
                f"knobs of interrupted trial(s) {requeued or 'none'} queued to run again"
            )


def _trials(
    s: Search, study: optuna.Study, parent: ParentRun | NoParent, plan: SearchPlan, start: float
) -> None:
    """Asks, runs and tells trials until the study holds ``search.trials``, the time budget
    has passed, or the rest, revised from what the trials took, would end past
    ``max_minutes`` (then ``s.stopped`` says so; the finished trials are kept)."""
    budget_s = None if plan.budget_minutes is None else plan.budget_minutes * 60
    took: list[float] = []
    paced: list[tuple[float, float]] = []  # (took, estimated) of the trials that measured
    while finished(study) < s.search.trials:
        stop_if_signalled()  # a safe point between trials
        if budget_s is not None and time.perf_counter() - start > budget_s:
            s.say(f"time budget of {plan.budget_minutes:g} min reached")
            return
        began = time.perf_counter()
        trial, outcome = _one_trial(s, study, parent)
        _answer(s, study, parent)
        estimated = plan.estimate_of(len(took))
        took.append((time.perf_counter() - began) / 60)
        if outcome.measured:
            paced.append((took[-1], estimated))
        left = s.search.trials - finished(study)
        revised = plan.revised_minutes(paced, left)
        end = (time.perf_counter() - start) / 60 + revised
        s.say(
            f"trial {trial.number} took {took[-1]:.1f} min (estimated {estimated:.1f}); {left} "
            f"left, about {revised:.1f} min more at the measured pace "
            f"({end:.1f} of max_minutes={plan.max_minutes:g} in all)"
        )
        if left and end > plan.max_minutes:
            s.stopped = (
                f"stopped after {len(took)} trial(s) of this invocation: at the measured pace the "
                f"{left} left would end at {end:.1f} min, over max_minutes={plan.max_minutes:g}; "
                f"the study keeps its {finished(study)} finished trials (search.resume=true with "
                "a higher max_minutes continues it)"
            )
            s.say(s.stopped)
            return


def _one_trial(
    s: Search, study: optuna.Study, parent: ParentRun | NoParent
) -> tuple[optuna.Trial, TrialOutcome]:
    """Asks for a trial, runs it and tells the study how it ended.

    From ``ask()`` until it is told, the trial is ``s.current``: Ctrl-C and SIGTERM wait while it
    is asked and while it is told, so that an interruption anywhere finds it there and fails it
    (:func:`_close_on_error`) instead of leaving it RUNNING in the study.
    """
    with signals_deferred():
        s.current = study.ask()
    trial = s.current
    knobs = suggest(trial, s.search)
    name = trial.user_attrs.get(REFERENCE_ATTR) or f"{s.name}-t{trial.number}"
    tags = {SEARCH_TAG: s.name, TRIAL_TAG: str(trial.number)}
    if parent.run_id is not None:
        tags[PARENT_TAG] = parent.run_id
    s.say(f"trial {trial.number} ({name}): {knobs}")
    began = time.perf_counter()
    cfg = trial_config(s.run_cfg, name, knobs, tags, routing_stats=s.search.routing_stats)
    stop_if_signalled()  # a trial asked and not begun: failed as interrupted, run on resume
    outcome = run_trial(cfg)
    s.codes.append(outcome.code)
    trial.set_user_attr("wall_s", time.perf_counter() - began)
    with signals_deferred():
        _tell(s, study, trial, outcome)
        s.current = None
    return trial, outcome


def _close_on_error(
    s: Search, study: optuna.Study, parent: ParentRun | NoParent, err: BaseException
) -> None:
    """The search ends on ``err`` (Ctrl-C, SIGTERM, a bug): the trial in flight is failed in
    the study (marked interrupted on a signal, so that a resume runs it again), the answer's
    files are rewritten from the finished trials, and the parent run is closed KILLED (FAILED
    on an error); neither is left RUNNING.

    A signal that comes while the trial is failed (Ctrl-C pressed again) does not cut the
    cleanup: the search is ending already, and the command's exit code follows the first
    signal (``models.interruption.pending``) whatever raised."""
    import optuna

    interrupted = isinstance(err, KeyboardInterrupt | Terminated)
    why = f"{type(err).__name__}: {err}"[:5000]
    try:
        with contextlib.suppress(KeyboardInterrupt, Terminated), signals_deferred():
            trial = s.current
            running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if trial is not None and trial.number in {t.number for t in running}:
                trial.set_user_attr(ERROR_ATTR, why)
                if interrupted:
                    trial.set_user_attr(INTERRUPTED_ATTR, True)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            s.current = None
        _answer(s, study, parent)
    finally:
        if parent.run_id is not None:  # None: no tracking, or the parent was never created
            with signals_deferred():
                parent.set_tags({"error": why})
                parent.finish("KILLED" if interrupted else "FAILED")


def _tell(s: Search, study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """Records the trial's result: its objectives and constraints, or why it has none."""
    import optuna

    trial.set_user_attr(CODE_ATTR, outcome.code)
    values = None
    if outcome.measured:
        metrics = outcome.metrics
        try:
            values = objective_values(metrics, s.statistic)
        except ValueError as err:
            outcome = TrialOutcome(exit_codes.FAILED, None, str(err))
    if values is None:
        trial.set_user_attr(ERROR_ATTR, (outcome.error or "no metrics")[:5000])
        s.say(f"trial {trial.number} has no result: {outcome.error}")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    record_point(trial, readings(metrics, s.limits, s.statistic), metrics)
    study.tell(trial, list(values))


def _answer(s: Search, study: optuna.Study, parent: ParentRun | NoParent) -> Answer:
    """Rewrites the answer's files and uploads them to the parent run."""
    points = points_from_study(study)
    base = s.base
    suite = f"prompts={base.prompts or 'prompt'} seeds={base.seeds or [base.seed]}"
    provenance = (
        f"model={base.model.name} resolution={base.resolution.name} steps={base.steps} {suite} "
        f"(study {s.name})"
    )
    answer = write_answer(
        s.folder,
        points,
        psnr_label=s.psnr_label,
        limits=s.limits,
        schedule_name=s.schedule_name,
        provenance=provenance,
    )
    best = answer.recommended
    metrics = {"trials_finished": float(len(points))}
    if best is not None:
        metrics.update(best_speedup=best.speedup, best_psnr_db=best.psnr)
    parent.log({}, metrics)
    if best is not None:
        # Not ``schedule``: that tag makes a run a harness run to the reports.
        parent.set_tags(
            {"recommended_trial": str(best.number), "recommended_schedule": s.schedule_name}
        )
    parent.log_files(s.folder)
    return answer


def _verdict(s: Search, answer: Answer) -> SearchResult:
    """The exit code and closing line (:class:`SearchResult`)."""
    failed = [c for c in s.codes if c in (exit_codes.FAILED, exit_codes.REFUSED)]
    best = answer.recommended
    code = exit_codes.GATE_FAILED if best is None else exit_codes.OK
    if best is not None:
        message = (
            f"recommended trial {best.number} (speedup {best.speedup:.3f}x, "
            f"{s.psnr_label} {best.psnr:.2f} dB): {answer.schedule_path}"
        )
        if not s.limits:
            message += " (no gate threshold was set: it is simply the fastest trial)"
    elif answer.points:
        message = no_recommendation_message(answer.points)
    else:
        message = "no trial measured anything (see each trial's error)"
    if s.stopped:
        message += f"; {s.stopped}"
    if failed:
        code = exit_codes.FAILED if exit_codes.FAILED in failed else exit_codes.REFUSED
        message += (
            f"; {len(failed)} trial(s) were refused or failed (their errors are in the study)"
        )
    return SearchResult(answer, code, f"search {s.name}: {message}", s.psnr_label, s.schedule_name)
