"""One trial: the run's config with the trial's schedule, run by ``evalharness.run.run`` exactly
as ``python -m evalharness schedule=<that schedule>`` would run it, in this process (its arms
timed side by side under one load, like any run's). Between trials the dense-arm cache, the
encoder's cache and JAX's persistent compilation cache (``evalharness.compile_cache``) carry the
dense arms over; the sparse loop is recompiled for every new schedule, whose knobs are static
parts of its program (``docs/search.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from evalharness import exit_codes
from evalharness.exit_codes import RunFailed
from evalharness.metric_names import RunMetrics
from evalharness.refusal import CONFIG_ERRORS, PreflightRefusal
from evalharness.run import GateFailed, run
from evalharness.search.front import rounded

log = logging.getLogger(__name__)

PARENT_TAG = "mlflow.parentRunId"
SEARCH_TAG = "search"
TRIAL_TAG = "search_trial"


@dataclass(frozen=True)
class TrialOutcome:
    """How one trial ended.

    Attributes:
        code: the run's exit code (``evalharness.exit_codes``): 0 met the gate, 1 missed it
            (measured all the same), 2 refused before any work, 4 failed while running.
        metrics: what it measured (None when refused or failed).
        error: the one-line reason when refused or failed.
    """

    code: int
    metrics: RunMetrics | None
    error: str | None = None

    @property
    def measured(self) -> bool:
        """Whether the trial has metrics to place on the front."""
        return self.metrics is not None


def trial_config(
    base: DictConfig,
    name: str,
    knobs: Mapping[str, Any],
    tags: Mapping[str, str],
    *,
    routing_stats: bool = False,
) -> DictConfig:
    """The run's config of one trial.

    Args:
        base: the run's config (the search's composed config without ``search``).
        name: the schedule's name (a named schedule's, or ``<study>-t<number>``).
        knobs: the searched knobs.
        tags: MLflow tags added to the run (the parent run, the study, the trial number).
        routing_stats: ``search.routing_stats``: whether the trial's run records its routing
            (an untimed extra sparse run; no timing or quality metric depends on it).
    """
    cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
    with open_dict(cfg):
        cfg.schedule = {"name": name, "sparse": True, **{k: rounded(v) for k, v in knobs.items()}}
        cfg.logger.tags = {**(cfg.logger.tags or {}), **tags}
        cfg.dry_run = False
        cfg.routing_stats = bool(routing_stats)
    return cfg


def run_trial(cfg: DictConfig) -> TrialOutcome:
    """Runs one trial; Ctrl-C and SIGTERM go on up (the run has marked itself killed).

    A setting the run refuses is a refused trial (2); any other error is a failed one (4), a bug
    raised before the run's folder existed (a bare ``KeyError`` or ``TypeError``) logged with its
    traceback; the search goes on.

    Args:
        cfg: the trial's config (:func:`trial_config`).
    """
    try:
        return TrialOutcome(exit_codes.OK, run(cfg))
    except GateFailed as failure:
        return TrialOutcome(exit_codes.GATE_FAILED, failure.metrics)
    except PreflightRefusal as refusal:
        return TrialOutcome(exit_codes.REFUSED, None, str(refusal))
    except RunFailed as failure:
        return TrialOutcome(failure.exit_code, None, str(failure))
    except CONFIG_ERRORS as err:
        return TrialOutcome(exit_codes.REFUSED, None, f"{type(err).__name__}: {err}")
    except Exception as err:  # noqa: BLE001 - a bug: the trial failed, the search goes on
        log.exception("the trial's run failed before its folder was created")
        return TrialOutcome(exit_codes.FAILED, None, f"{type(err).__name__}: {err} (a bug)")
