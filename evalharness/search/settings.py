"""The ``search`` section of ``python -m evalharness.search``: the trial and time budgets, the
bounds of each schedule knob, the sampler's seed, where the study is stored and which PSNR
statistic is an objective.

It is a structured config like the run's (``evalharness.config``), registered as
``search_schema`` and composed first by ``conf/search.yaml``, so a misspelt ``search.*`` key or a
value of the wrong type fails at composition (:func:`unknown_search_key` names the closest key
before Hydra runs). A trial's config is the run's config without ``search`` (:func:`split_search`).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from evalharness.config import GateOn, limit_problem
from kernels.policy import SparsitySchedule
from kernels.policy.schedule import SPARSE_VARIANTS


@dataclass
class FloatRange:
    """The searched range of one fractional knob, on a grid of ``step`` (so that trials which
    land on the same grid point share a compiled sparse loop and a schedule file reads well).

    Attributes:
        low: the smallest value tried.
        high: the largest value tried (``low == high`` fixes the knob).
        step: the grid spacing; ``high - low`` must be a multiple of it.
    """

    low: float = 0.0
    high: float = 1.0
    step: float = 0.05


@dataclass
class SearchConfig:
    """What the search tries and for how long.

    Attributes:
        trials: trials the study should hold when done (finished ones; a resumed study counts
            those it already has, and a trial interrupted by Ctrl-C is run again).
        time_budget_minutes: no trial starts after this many minutes of this invocation (None:
            the trials alone bound it); a trial that started runs to its end.
        density: kept fraction of the sparse masks' query-key pairs.
        first_times_fp: fraction of dense warm-up steps.
        first_layers_fp: fraction of dense leading layers.
        routing_samples: the query rows sampled per (step, layer) to route heads; one is chosen.
        variant: sparse executor variants (``b1``, ``b2``, ``b3``); one is chosen.
        reference: named schedules (``conf/schedule/<name>.yaml``) run first as trials: the
            reference points of the front, measured in the same process under the same load as
            every other trial; a named schedule outside the bounds is skipped with a warning.
        sampler_seed: seed of Optuna's NSGA-II sampler (the same seed proposes the same trials).
        study_name: the study's name (None: ``search-<date>-<time>``); its folder is
            ``<output_root>/searches/<study_name>``.
        storage: an SQLAlchemy URL for Optuna's storage (None: ``optuna.db`` in the study's
            folder, or a ``optuna`` schema in the PostgreSQL database that
            ``logger.tracking_uri`` names).
        resume: continue the study named ``study_name`` (None: the latest study under
            ``<output_root>/searches``) instead of refusing an existing name.
        statistic: the PSNR statistic over a suite's pairs that is an objective and a
            constraint (``mean``, ``lcb``, ``worst``; None: ``gate.on``).
        schedule_name: the name of the recommended schedule's file (None:
            ``searched-<study_name>``).
        routing_stats: whether each trial records its routing statistics (one more, untimed
            sparse run per pair and its compile, for the routing plots; no objective or
            constraint reads them). Off by default: a plain run of the recommended schedule
            records them.
    """

    trials: int = 12
    time_budget_minutes: float | None = None
    # 0.2: the smallest grid value whose band is one 128-token tile wide at the cpu preset
    density: FloatRange = field(default_factory=lambda: FloatRange(0.2, 0.6, 0.05))
    first_times_fp: FloatRange = field(default_factory=lambda: FloatRange(0.0, 0.4, 0.05))
    first_layers_fp: FloatRange = field(default_factory=lambda: FloatRange(0.0, 0.2, 0.01))
    routing_samples: list[int] = field(default_factory=lambda: [32, 64, 128])
    variant: list[str] = field(default_factory=lambda: ["b2", "b3"])
    reference: list[str] = field(default_factory=lambda: ["conservative", "balanced", "aggressive"])
    sampler_seed: int = 0
    study_name: str | None = None
    storage: str | None = None
    resume: bool = False
    statistic: GateOn | None = None
    schedule_name: str | None = None
    routing_stats: bool = False


def register_search_configs() -> None:
    """Registers ``search_schema``, composed first by ``conf/search.yaml``: a plain root holding
    the typed ``search`` section, onto which the run's typed ``eval_schema`` is merged (a typed
    root would refuse the run's schema, which is not a subclass of it)."""
    root = OmegaConf.create({"search": OmegaConf.structured(SearchConfig)})
    ConfigStore.instance().store(name="search_schema", node=root)


def split_search(cfg: DictConfig | dict) -> tuple[SearchConfig, DictConfig]:
    """Splits the composed config into the search's section and the run's config.

    Args:
        cfg: the composed config of ``conf/search.yaml`` (or a plain dict with a ``search`` key).

    Returns:
        (the validated search section, the run's config without ``search``).

    Raises:
        ValueError: a bound, choice or budget that no search can use (the message names it).
    """
    node = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    container = OmegaConf.to_container(node, resolve=False)
    search_part = container.pop("search", None) or {}
    container.pop("hydra", None)
    merged = OmegaConf.merge(OmegaConf.structured(SearchConfig), search_part)
    search = OmegaConf.to_object(merged)
    check_search(search)
    return search, OmegaConf.create(container)


def check_search(search: SearchConfig) -> None:
    """Refuses a search section no search can use; each message names the key and the fix."""
    problems = []
    if search.trials < 1:
        problems.append(f"search.trials={search.trials} must be >= 1")
    budget = limit_problem("search.time_budget_minutes", search.time_budget_minutes, positive=True)
    if budget:
        problems.append(f"{budget}, or null for no time budget")
    limits = {"density": (0.0, 1.0, True), "first_times_fp": (0.0, 1.0, False)}
    limits["first_layers_fp"] = (0.0, 1.0, False)
    for name, (lowest, highest, open_low) in limits.items():
        problems += _range_problems(name, getattr(search, name), lowest, highest, open_low)
    if not search.routing_samples or any(s < 1 for s in search.routing_samples):
        problems.append(
            f"search.routing_samples={list(search.routing_samples)} must list counts >= 1, "
            "e.g. [32,64,128]"
        )
    bad = [v for v in search.variant if v not in SPARSE_VARIANTS]
    if not search.variant or bad:
        problems.append(
            f"search.variant={list(search.variant)} must list variants of {SPARSE_VARIANTS}"
        )
    if search.study_name is not None and not _plain_name(search.study_name):
        problems.append(
            f"search.study_name={search.study_name!r} must be a plain name (letters, digits, "
            "'-', '_', '.'): it names a folder"
        )
    if search.schedule_name is not None and not _plain_name(search.schedule_name):
        problems.append(
            f"search.schedule_name={search.schedule_name!r} must be a plain name: it names "
            "conf/schedule/<name>.yaml"
        )
    if problems:
        raise ValueError("; ".join(problems))


def _range_problems(
    name: str, knob: FloatRange, lowest: float, highest: float, open_low: bool
) -> list[str]:
    """What is wrong with one knob's range (empty when nothing is)."""
    key = f"search.{name}"
    bounds = (("low", knob.low, False), ("high", knob.high, False), ("step", knob.step, True))
    not_finite = [limit_problem(f"{key}.{b}", v, positive=p) for b, v, p in bounds]
    if any(not_finite):
        return [p for p in not_finite if p]
    where = f"({lowest:g}, {highest:g}]" if open_low else f"[{lowest:g}, {highest:g}]"
    below = knob.low <= lowest if open_low else knob.low < lowest
    if below or knob.high > highest or knob.low > knob.high:
        return [
            f"{key}: low={knob.low:g}, high={knob.high:g} must satisfy low <= high within {where}"
        ]
    if knob.step <= 0:
        return [f"{key}.step={knob.step:g} must be > 0, e.g. 0.05"]
    steps = (knob.high - knob.low) / knob.step
    if abs(steps - round(steps)) > 1e-6:
        return [
            f"{key}: high - low = {knob.high - knob.low:g} is not a multiple of step="
            f"{knob.step:g}; pick bounds on the step's grid"
        ]
    return []


def unknown_search_key(path: str) -> str | None:
    """The problem with a ``search.*`` override's key, with the closest key; None if it is one.

    Args:
        path: the dotted key, e.g. ``search.density.low``.
    """
    parts = path.split(".")[1:]
    node: Any = SearchConfig
    for depth, part in enumerate(parts):
        fields = (
            {f.name: f for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
        )
        if part not in fields:
            close = difflib.get_close_matches(part, sorted(fields), n=1, cutoff=0.6)
            hint = (
                f"; did you mean {'.'.join(['search', *parts[:depth], close[0]])}?" if close else ""
            )
            return (
                f"unknown setting {path!r}{hint}; the settings here are {', '.join(sorted(fields))}"
            )
        node = FloatRange if fields[part].type in ("FloatRange", FloatRange) else None
    return None


def _plain_name(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c in "-_." for c in text) and text[0] != "."


def within_bounds(search: SearchConfig, schedule: SparsitySchedule) -> list[str]:
    """The knobs of ``schedule`` outside the search's bounds (empty: it is a point of the space).

    Args:
        search: the search section.
        schedule: a schedule (e.g. a named one, as a reference trial).
    """
    outside = []
    for name in ("density", "first_times_fp", "first_layers_fp"):
        knob: FloatRange = getattr(search, name)
        value = getattr(schedule, name)
        if not knob.low - 1e-9 <= value <= knob.high + 1e-9:
            outside.append(f"{name}={value:g} (bounds {knob.low:g} .. {knob.high:g})")
    if schedule.routing_samples not in search.routing_samples:
        outside.append(
            f"routing_samples={schedule.routing_samples} (not in {search.routing_samples})"
        )
    if str(schedule.variant) not in search.variant:
        outside.append(f"variant={schedule.variant} (not in {list(search.variant)})")
    return outside


def search_dict(search: SearchConfig) -> dict[str, Any]:
    """The search section as plain values (for ``search.json`` and MLflow params)."""
    out = dataclasses.asdict(search)
    out["statistic"] = None if search.statistic is None else str(search.statistic)
    return out
