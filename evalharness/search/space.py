"""The search space: a trial's knobs from Optuna's sampler within ``search.*`` bounds, the named
schedules queued as the first trials (reference points), and the sampler itself.

TPE rather than NSGA-II, Optuna's multi-objective default: NSGA-II's first generation (50 trials
by default) is random, which at a dozen trials is a random search; TPE models the trials after a
few random ones.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from evalharness.config import CONF_DIR
from evalharness.search.front import KNOBS, rounded
from evalharness.search.settings import RANGE_KNOBS, SearchConfig, within_bounds
from evalharness.search.summary import REFERENCE_ATTR
from kernels.policy import SparsitySchedule

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)


def suggest(trial: optuna.Trial, search: SearchConfig) -> dict[str, Any]:
    """The trial's knobs (:data:`~evalharness.search.front.KNOBS`), on each range's grid."""
    knobs: dict[str, Any] = {}
    for name in RANGE_KNOBS:
        knob = getattr(search, name)
        knobs[name] = rounded(trial.suggest_float(name, knob.low, knob.high, step=knob.step))
    knobs["routing_samples"] = trial.suggest_categorical(
        "routing_samples", list(search.routing_samples)
    )
    knobs["variant"] = trial.suggest_categorical("variant", list(search.variant))
    return knobs


def named_schedule(name: str) -> SparsitySchedule:
    """A schedule of ``conf/schedule/<name>.yaml``, read without Hydra.

    Raises:
        FileNotFoundError: no such schedule (the message lists those there are).
    """
    path = CONF_DIR / "schedule" / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise FileNotFoundError(
            f"search.reference names {name!r}, but there is no {path}; use one of {names}, or "
            "search.reference=[] for none"
        )
    values = OmegaConf.to_container(OmegaConf.load(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the dense schedule's "never sparse"
        return SparsitySchedule.from_mapping(values)


def reference_trials(search: SearchConfig) -> list[tuple[str, dict[str, Any]]]:
    """The named schedules to run first, as (name, knobs); those outside the bounds (or not
    sparse) are skipped with a warning saying which knob is outside."""
    out = []
    for name in search.reference:
        schedule = named_schedule(name)
        outside = within_bounds(search, schedule)
        if not schedule.sparse or outside:
            why = "; ".join(outside) or "it is not sparse"
            log.warning("search.reference: %s is not a point of the search space (%s)", name, why)
            continue
        knobs = {k: getattr(schedule, k) for k in KNOBS}
        knobs["variant"] = str(knobs["variant"])
        out.append((name, knobs))
    return out


def enqueue_references(
    study: optuna.Study, references: list[tuple[str, dict[str, Any]]]
) -> list[str]:
    """Queues the reference schedules (:func:`reference_trials`) as the study's first trials;
    returns their names."""
    queued = []
    for name, knobs in references:
        study.enqueue_trial(knobs, user_attrs={REFERENCE_ATTR: name}, skip_if_exists=True)
        queued.append(name)
    return queued


def make_sampler(search: SearchConfig, offset: int = 0) -> optuna.samplers.BaseSampler:
    """Optuna's TPE sampler seeded by ``search.sampler_seed`` plus ``offset`` (a resumed study's
    trials: ``evalharness.search.resume.sampler_offset``); it reads the gate's constraints that
    each trial sets (``Trial.set_constraint``, Optuna 5's successor of ``constraints_func``).

    A third of the trials (at least 4, at most TPE's default 10) are random before TPE models
    them, so a small budget still explores.
    """
    import optuna

    startup = min(10, max(4, search.trials // 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=search.sampler_seed + offset, n_startup_trials=startup, multivariate=True
        )
