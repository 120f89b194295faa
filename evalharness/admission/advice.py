"""Advice that works: each setting that might make a run fit is applied and the run re-planned
before it is printed.

The candidates shrink what the memory table says is too large: ``guidance_passes=separate`` (half
the activations), a flash-style executor for an arm whose executor grows as N^2, more devices when
the target has them, bfloat16 for a float32 run, the next smaller resolution. Each is applied to
the requested config and planned again with our model (seconds; nothing compiled for the chip).
Only the settings that fit are printed; when none fits alone, the pairs that fit; otherwise what
each gives, so the user sees how far it is.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evalharness.admission.sizing import RunSizing
from evalharness.config import EvalConfig, load_resolution, resolution_names
from evalharness.estimates import GIB
from evalharness.exit_codes import stop_if_signalled
from kernels.executors.dense_memory import grows_quadratically
from kernels.registry import PLATFORMS

# Flash-style (no N^2 array) executors per platform, in the order they are suggested: the
# platform's dense controls that are, then our tiled b0.
_FLASH = {
    name: tuple(
        dict.fromkeys(
            e for e in (p.dense_control, p.noise_floor_control, "b0") if not grows_quadratically(e)
        )
    )
    for name, p in PLATFORMS.items()
}
_EXECUTOR_KEYS = {"dense": "kernel.dense_executor", "noise_floor": "kernel.noise_floor_executor"}


@dataclass(frozen=True)
class Setting:
    """Overrides to try (dotted config key -> value), printed as a user would type them."""

    overrides: Mapping[str, Any]

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())


def candidate_settings(requested: EvalConfig, sizing: RunSizing) -> list[Setting]:
    """Settings that shrink what does not fit in ``sizing``'s memory table."""
    table, target = sizing.memory, sizing.target
    found = []
    if sizing.batch > 1:
        found.append(Setting({"guidance_passes": "separate"}))
    for arm, key in _EXECUTOR_KEYS.items():
        executor = _executor(table.executors.get(arm, ""))
        if arm in table.arms and grows_quadratically(executor):
            other = _executor(table.executors.get("noise_floor" if arm == "dense" else "dense", ""))
            flash = [e for e in _FLASH.get(target.platform, ()) if e != other]
            found += [Setting({key: flash[0]})] if flash else []
    if 2 * sizing.devices <= target.devices:
        found.append(Setting({"parallel.sequence": 2 * sizing.devices}))
    if requested.dtype.value == "float32" or requested.model.param_dtype.value == "float32":
        found.append(Setting({"dtype": "bfloat16", "model.param_dtype": "bfloat16"}))
    smaller = _smaller_resolution(requested)
    if smaller is not None:
        found.append(Setting({"resolution": smaller}))
    return found


def checked_advice(
    requested: EvalConfig,
    sizing: RunSizing,
    plan: Callable[[EvalConfig], RunSizing],
) -> list[str]:
    """The settings that make the run fit, each checked by planning it again.

    Args:
        requested: the config as asked (before ``platform_choices.resolve``).
        sizing: its plan, which does not fit.
        plan: plans a requested config on the same target (resolving it first).

    Returns:
        Lines: the settings (or pairs) that fit, with their peak; else what each gives.
    """
    candidates = candidate_settings(requested, sizing)
    tried = {str(setting): _try(requested, [setting], plan) for setting in candidates}
    fits = [
        f"{name}: fits, peak {peak:,.2f} GiB (checked)" for name, (ok, peak) in tried.items() if ok
    ]
    if not fits:  # none fits alone: the pairs
        for pair in itertools.combinations(candidates, 2):
            ok, peak = _try(requested, list(pair), plan)
            if ok:
                fits.append(f"{pair[0]} {pair[1]}: fits, peak {peak:,.2f} GiB (checked)")
    if fits:
        return fits
    limit = sizing.memory.device_bytes / GIB
    return [
        f"no setting below fits alone or in pairs (each planned again; the device holds "
        f"{limit:,.2f} GiB); a larger target or a smaller model is needed",
        *(f"{name}: peak {peak:,.2f} GiB, still too large" for name, (_, peak) in tried.items()),
    ]


def apply_setting(cfg: EvalConfig, overrides: Mapping[str, Any]) -> EvalConfig:
    """``cfg`` with ``overrides`` applied (dotted keys; ``resolution`` takes a preset's name)."""
    for key, value in overrides.items():
        if key == "resolution":
            cfg = dataclasses.replace(cfg, resolution=load_resolution(value).config)
        else:
            cfg = _replace_path(cfg, key.split("."), value)
    return cfg


def _try(
    requested: EvalConfig, settings: list[Setting], plan: Callable[[EvalConfig], RunSizing]
) -> tuple[bool, float]:
    stop_if_signalled()  # a safe point between the plans each piece of advice is checked with
    cfg = requested
    for setting in settings:
        cfg = apply_setting(cfg, setting.overrides)
    try:
        sizing = plan(cfg)
    except ValueError:  # a combination the config itself refuses
        return False, float("inf")
    return sizing.fits, sizing.memory.peak_bytes / GIB


def _replace_path(obj: Any, path: list[str], value: Any) -> Any:
    head, rest = path[0], path[1:]
    current = getattr(obj, head)
    if rest:
        return dataclasses.replace(obj, **{head: _replace_path(current, rest, value)})
    if isinstance(current, enum.Enum):
        value = type(current)(value)
    return dataclasses.replace(obj, **{head: value})


def _executor(column: str) -> str:
    """The executor's name from a memory table column title ("b0, compiled" -> "b0")."""
    return column.split(" ")[0].split(",")[0]


def _smaller_resolution(cfg: EvalConfig) -> str | None:
    """The preset with the most tokens below the requested resolution's, if any."""
    current = cfg.resolution.frames * cfg.resolution.height * cfg.resolution.width
    sizes = {}
    for name in resolution_names():
        if name == cfg.resolution.name:
            continue
        res = load_resolution(name).config
        sizes[name] = res.frames * res.height * res.width
    below = {name: size for name, size in sizes.items() if size < current}
    return max(below, key=below.__getitem__) if below else None
