"""The ``search`` section of ``python -m evalharness.search`` (its keys: ``docs/search.md``): a
structured config like the run's, registered as ``search_schema`` and composed first by
``conf/search.yaml``, so a misspelt key or a wrong type fails at composition
(:func:`unknown_search_key` names the closest key before Hydra runs). A trial's config is the
run's config without ``search`` (:func:`split_search`). :func:`check_density_floor` checks the
density range against the run's geometry.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from evalharness.assembly import platform_choices
from evalharness.config import EvalConfig, GateOn, limit_problem, token_geometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy import SparsitySchedule
from kernels.policy.schedule import SPARSE_VARIANTS

# The fractional knobs, each searched over a FloatRange.
RANGE_KNOBS = ("density", "first_times_fp", "first_layers_fp")


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
        trials: finished trials the study should hold (a resume counts those it has; a trial
            interrupted by Ctrl-C runs again).
        time_budget_minutes: no trial starts after this many minutes of this invocation (None:
            none); a started trial runs to its end.
        density: kept fraction of the sparse masks' query-key pairs.
        first_times_fp: fraction of dense warm-up steps.
        first_layers_fp: fraction of dense leading layers.
        routing_samples: query rows sampled per (step, layer) to route heads; one is chosen.
        variant: sparse executor variants (``b1``, ``b2``, ``b3``); one is chosen.
        reference: named schedules (``conf/schedule/<name>.yaml``) run first, as the front's
            reference points measured under the trials' load; one outside the bounds is skipped
            with a warning.
        sampler_seed: the TPE sampler's seed (the same seed proposes the same trials).
        study_name: the study's name and folder ``<output_root>/searches/<study_name>`` (None:
            ``search-<date>-<time>``).
        storage: Optuna's SQLAlchemy URL (None: ``evalharness.search.storage.storage_url``'s).
        resume: continue ``study_name`` (None: the latest study under ``<output_root>/searches``)
            instead of refusing a taken name.
        statistic: the PSNR statistic that is an objective and a constraint (``mean``, ``lcb``,
            ``worst``; None: ``gate.on``).
        schedule_name: the recommended schedule's name (None: ``searched-<study_name>``).
        routing_stats: whether each trial records its routing statistics (an untimed extra
            sparse run and its compile per pair; nothing the search reads). Off by default: a
            plain run of the recommended schedule records them.
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
    for name in RANGE_KNOBS:  # every knob is a fraction; a density of 0 keeps nothing
        problems += _range_problems(name, getattr(search, name), open_low=name == "density")
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
    for key, why in (
        ("study_name", " (letters, digits, '-', '_', '.'): it names a folder"),
        ("schedule_name", ": it names conf/schedule/<name>.yaml"),
    ):
        value = getattr(search, key)
        if value is not None and not _plain_name(value):
            problems.append(f"search.{key}={value!r} must be a plain name{why}")
    if problems:
        raise ValueError("; ".join(problems))


def _range_problems(name: str, knob: FloatRange, *, open_low: bool) -> list[str]:
    """What is wrong with one knob's range within [0, 1] (empty when nothing is)."""
    key = f"search.{name}"
    bounds = (("low", knob.low, False), ("high", knob.high, False), ("step", knob.step, True))
    not_finite = [limit_problem(f"{key}.{b}", v, positive=p) for b, v, p in bounds]
    if any(not_finite):
        return [p for p in not_finite if p]
    where = "(0, 1]" if open_low else "[0, 1]"
    below = knob.low <= 0 if open_low else knob.low < 0
    if below or knob.high > 1 or knob.low > knob.high:
        return [
            f"{key}: low={knob.low:g}, high={knob.high:g} must satisfy low <= high within {where}"
        ]
    steps = (knob.high - knob.low) / knob.step
    if abs(steps - round(steps)) > 1e-6:
        return [
            f"{key}: high - low = {knob.high - knob.low:g} is not a multiple of step="
            f"{knob.step:g}; pick bounds on the step's grid"
        ]
    return []


def check_density_floor(search: SearchConfig, base: EvalConfig) -> None:
    """Refuses a density range whose low end this run's geometry cannot run: a band narrower
    than one tile is refused by every trial that draws it (each would end the search with code 2
    for a point the search itself chose).

    Raises:
        ValueError: ``search.density.low`` too small; the message names the smallest grid value
            the geometry and tiles allow, or says that none does.
    """
    resolved = platform_choices.resolve(base)
    geometry = token_geometry(base.resolution.video)
    tiles = BlockSizes(resolved.kernel.block_q, resolved.kernel.block_kv)
    knob = search.density
    steps = round((knob.high - knob.low) / knob.step) if knob.step else 0
    first_error = None
    for i in range(steps + 1):
        density = round(knob.low + i * knob.step, 6)
        try:
            probe = SparsitySchedule("density-floor", first_times_fp=0.0, density=density)
            probe.validate(geometry, tiles)
        except ValueError as err:
            first_error = first_error or err
            continue
        if first_error is not None:
            raise ValueError(
                f"search.density.low={knob.low:g}: {first_error}. The smallest density on the "
                f"search's grid this run allows is {density:g}: set search.density.low={density:g}"
            )
        return
    raise ValueError(
        f"search.density={knob.low:g}..{knob.high:g}: no value on its grid can run here "
        f"({first_error}); raise search.density.high or use smaller kernel tiles"
    )


def unknown_search_key(path: str) -> str | None:
    """The problem with a ``search.*`` override's key, with the closest key; None if it is one.

    Args:
        path: the dotted key, e.g. ``search.density.low``.
    """
    parts = path.split(".")[1:]
    node: Any = SearchConfig  # None below a leaf
    for depth, part in enumerate(parts):
        types = {f.name: f.type for f in dataclasses.fields(node)} if node else {}
        if part not in types:
            close = difflib.get_close_matches(part, sorted(types), n=1, cutoff=0.6)
            hint = (
                f"; did you mean {'.'.join(['search', *parts[:depth], *close])}?" if close else ""
            )
            return (
                f"unknown setting {path!r}{hint}; the settings here are {', '.join(sorted(types))}"
            )
        node = FloatRange if types[part] in ("FloatRange", FloatRange) else None
    return None


def search_value_problem(arg: str) -> str | None:
    """What composing a ``search.<key>=<value>`` override would refuse in its value (a type or a
    choice, e.g. ``search.statistic=median``), with the key and the valid values named; None when
    the value fits, or the override is a sweep. Its key is known (:func:`unknown_search_key`)."""
    key = arg.split("=", 1)[0]
    parts = key.split(".")[1:]
    node = OmegaConf.structured(FloatRange if len(parts) == 2 else SearchConfig)
    try:
        override = OverridesParser.create().parse_override(arg)
        if override.is_sweep_override():
            return None
        node[parts[-1]] = override.value()
    except (HydraException, OmegaConfBaseException) as err:
        reason = str(err).strip().splitlines()[0]
        return f"{key}: {reason}"
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
    for name in RANGE_KNOBS:
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
