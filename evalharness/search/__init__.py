"""The schedule search: ``python -m evalharness.search`` runs a multi-objective Optuna study over
the sparsity schedule's knobs (maximize speedup and PSNR, the gate's thresholds as constraints),
each trial a whole run nested under one MLflow parent, and writes the front and the recommended
schedule (``docs/search.md``).
"""

from evalharness.search.front import (
    TrialPoint,
    feasible_front,
    pareto_front,
    recommend,
    uncovered_references,
    unmet_message,
)
from evalharness.search.objectives import Reading, objective_values, readings, thresholds
from evalharness.search.settings import register_search_configs, split_search, unknown_search_key
from evalharness.search.study_run import dry_run_search, run_search
from evalharness.search.summary import schedule_text, write_schedule

__all__ = [
    "Reading",
    "TrialPoint",
    "dry_run_search",
    "feasible_front",
    "objective_values",
    "pareto_front",
    "readings",
    "recommend",
    "register_search_configs",
    "run_search",
    "schedule_text",
    "split_search",
    "thresholds",
    "uncovered_references",
    "unknown_search_key",
    "unmet_message",
    "write_schedule",
]
