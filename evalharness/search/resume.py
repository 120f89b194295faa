"""Resuming a study honestly: the same measurement, no trial left RUNNING, no point drawn again.

A resume continues a study only when its trials measure the same thing. What decides that (the
run settings a trial's numbers depend on, the search's bounds and its PSNR statistic:
:func:`comparable_settings`) is recorded on the study when it is created, and a resume with
anything else is refused before any work, naming each difference (:func:`settings_differences`,
the one function deciding, as training refuses a run folder trained with other settings).

A search killed outright (SIGKILL, a lost machine) leaves its trial RUNNING in the storage. The
resume fails that trial as lost and queues its knobs again with the interrupted trials' knobs,
once each (:func:`recover_trials`); while the process that ran the study still runs on this host,
the resume is refused instead (its trial is not lost). A process on another host cannot be
checked from here: resuming says it is gone.

The sampler is seeded with ``search.sampler_seed`` plus the number of trials the study holds when
it is resumed (:func:`sampler_offset`). Seeded with the bare seed again, TPE's random start-up
would draw the fresh study's first point once more on every resume. The offset keeps the search
reproducible (a given study resumed at a given size proposes the same points), which a sampler
state saved in the storage would too, but Optuna's samplers keep their random state in NumPy
objects that the storage's JSON attributes do not hold.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalharness.config import EvalConfig, to_plain_dict
from evalharness.evidence import run_status
from evalharness.refusal import PreflightRefusal
from evalharness.search.settings import RANGE_KNOBS, SearchConfig
from evalharness.search.summary import REFERENCE_ATTR

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

# Trial attributes: why a trial failed, and whether an interruption (Ctrl-C, SIGTERM, a lost
# process) ended it before it measured anything, so that a resume runs its knobs again.
ERROR_ATTR = "error"
INTERRUPTED_ATTR = "interrupted"
# Study attributes: the trials whose knobs were queued again, the settings its trials were
# measured with, and the process that runs it (``evidence.run_status.process_stamp``).
REQUEUED_ATTR = "requeued_trials"
SETTINGS_ATTR = "comparable_settings"
OWNER_ATTR = "owner_process"

# Every top-level run setting (a field of ``EvalConfig``) is in exactly one of these two sets,
# and :func:`comparable_settings` refuses to build from one in neither or both: a new setting
# must be classified before a search runs. Compared on a resume: what a trial's numbers depend on (the
# model, the video, the prompts and noise seeds, the sampler and its guidance, the dtype, the
# kernels and the devices, the timing's repeats and dense controls, the deliberately broken arm)
# and the gate its standing is judged by.
COMPARED = frozenset(
    {
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
)
# Not compared: where a trial's files and records go, how long the search may take, how the
# viewable videos are encoded, what a dry run would target, and what each trial sets itself (its
# schedule, its routing statistics).
NOT_COMPARED = frozenset(
    {
        "schedule",
        "routing_stats",
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
)


def comparable_settings(base: EvalConfig, search: SearchConfig, statistic: str) -> dict[str, Any]:
    """What two trials must share to stand on one front, as flat dotted keys and JSON values.

    Args:
        base: the run's checked config (``steps`` filled in).
        search: the search section; its bounds and choices are compared, its budget is not.
        statistic: the PSNR statistic the objectives are read at.
    """
    plain = to_plain_dict(base)
    unclassified = sorted((set(plain) - COMPARED - NOT_COMPARED) | (COMPARED & NOT_COMPARED))
    if unclassified:  # a setting in neither set above, or in both: a bug here, not the user's
        raise RuntimeError(
            f"run settings {unclassified} are not in exactly one of resume.COMPARED and "
            "resume.NOT_COMPARED: classify each by whether a trial's numbers depend on it"
        )
    run = {k: v for k, v in plain.items() if k in COMPARED}
    searched: dict[str, Any] = {k: dataclasses.asdict(getattr(search, k)) for k in RANGE_KNOBS}
    searched.update(
        routing_samples=list(search.routing_samples),
        variant=list(search.variant),
        statistic=statistic,
    )
    flat = _flat({**run, "search": searched})
    return json.loads(json.dumps(flat, default=str))  # as the storage gives it back


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def settings_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each setting whose value differs, as ``key: <in the study> in the study vs <now> now``
    (empty: the trials are comparable)."""
    missing = "(unset)"
    return [
        f"{key}: {recorded.get(key, missing)} in the study vs {current.get(key, missing)} now"
        for key in sorted(set(recorded) | set(current))
        if recorded.get(key, missing) != current.get(key, missing)
    ]


def check_resumable(study: optuna.Study, current: Mapping[str, Any]) -> None:
    """Refuses a resume whose trials would not be comparable, or of a study another process on
    this host is running.

    Raises:
        PreflightRefusal: naming every setting that differs, or the running process.
    """
    name = study.study_name
    recorded = study.user_attrs.get(SETTINGS_ATTR)
    differ = settings_differences(recorded, current) if recorded is not None else []
    if differ:
        raise PreflightRefusal(
            f"search.resume=true, but study {name!r} was measured with other settings "
            f"({'; '.join(differ)}); resume with the same ones, or start a new study (another "
            "search.study_name) for these"
        )
    owner = study.user_attrs.get(OWNER_ATTR)
    if owner and owner != run_status.process_stamp() and run_status.process_alive(owner):
        raise PreflightRefusal(
            f"study {name!r} is being run by process {owner.get('pid')} on this host; wait for "
            "it to end (or stop it), then resume"
        )


def claim(study: optuna.Study, current: Mapping[str, Any]) -> None:
    """Records this process as the study's and, where it has none yet, the settings its trials
    are measured with (a study made before they were recorded takes this resume's)."""
    if study.user_attrs.get(SETTINGS_ATTR) is None:
        if study.trials:
            log.warning(
                "study %s has no recorded settings: its trials are taken to share this resume's",
                study.study_name,
            )
        study.set_user_attr(SETTINGS_ATTR, dict(current))
    study.set_user_attr(OWNER_ATTR, run_status.process_stamp())


def sampler_offset(study: optuna.Study) -> int:
    """What a resumed study adds to ``search.sampler_seed``: the trials it holds (module
    docstring)."""
    return len(study.get_trials(deepcopy=False))


def finished(study: optuna.Study) -> int:
    """Trials that count towards ``search.trials``: completed, or failed other than by an
    interruption."""
    import optuna

    states = optuna.trial.TrialState
    return sum(
        t.state == states.COMPLETE
        or (t.state == states.FAIL and not t.user_attrs.get(INTERRUPTED_ATTR))
        for t in study.get_trials(deepcopy=False)
    )


def recover_trials(study: optuna.Study) -> tuple[list[int], list[int]]:
    """Fails each trial a lost process left RUNNING, then queues once more the knobs of every
    interrupted trial not queued before (:func:`check_resumable` has ruled out a live owner).

    Returns:
        (the trials failed as lost, the trials whose knobs were queued again).
    """
    import optuna

    owner = study.user_attrs.get(OWNER_ATTR) or {}
    who = f"process {owner.get('pid', '?')} on {owner.get('host', '?')}"
    lost = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        trial = optuna.trial.Trial(study, t._trial_id)
        trial.set_user_attr(ERROR_ATTR, f"lost: {who} ended without telling the study")
        trial.set_user_attr(INTERRUPTED_ATTR, True)
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        lost.append(t.number)
        log.warning("trial %d was left running by %s, which is gone: marked failed", t.number, who)
    return lost, _requeue_interrupted(study)


def _requeue_interrupted(study: optuna.Study) -> list[int]:
    """Queues the knobs of each interrupted trial once: a trial listed in the study's
    ``requeued_trials``, or whose knobs wait in the queue already, is not queued again."""
    import optuna

    states = optuna.trial.TrialState
    done = set(study.user_attrs.get(REQUEUED_ATTR, []))
    trials = study.get_trials(deepcopy=False)
    waiting = [t.system_attrs.get("fixed_params") for t in trials if t.state == states.WAITING]
    queued = []
    for t in trials:
        if t.state != states.FAIL or not t.user_attrs.get(INTERRUPTED_ATTR) or t.number in done:
            continue
        knobs = dict(t.params or t.system_attrs.get("fixed_params") or {})
        if knobs and knobs not in waiting:
            attrs = {k: v for k, v in t.user_attrs.items() if k == REFERENCE_ATTR}
            study.enqueue_trial(knobs, user_attrs=attrs)
            waiting.append(knobs)
            queued.append(t.number)
        done.add(t.number)
    study.set_user_attr(REQUEUED_ATTR, sorted(done))
    return queued
