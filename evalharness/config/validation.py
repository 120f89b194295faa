"""The values no run can use, refused when the config is composed (before any work), each
message naming the key and the fix. The schemas check types and choices; this checks ranges."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from evalharness.config.limits import limit_problem

# Thresholds and limits, each a finite number (``limit_problem``): key -> whether 0 is refused.
LIMITS = (
    ("gate.min_psnr_db", False),
    ("gate.min_worst_frame_psnr_db", False),
    ("gate.min_speedup", False),
    ("max_minutes", True),
)


def check_values(cfg: DictConfig) -> None:
    """Refuses, before any work, the values no run can use (each message names the fix).

    An empty prompt is refused rather than run: it is almost always a template or shell variable
    that was not filled in (``prompt=$PROMPT``), and it would compare unconditional videos.
    """
    problems = []
    if cfg.steps < 1 or cfg.warm_runs < 1:
        problems.append(f"steps={cfg.steps} and warm_runs={cfg.warm_runs} must both be >= 1")
    if not math.isfinite(cfg.guidance_scale) or cfg.guidance_scale < 0:
        problems.append(
            f"guidance_scale={cfg.guidance_scale} must be a finite number >= 0 (Wan's default "
            "is 5.0; 1.0 turns classifier-free guidance off)"
        )
    seeds = [cfg.seed] + list(cfg.seeds or [])
    bad = [s for s in seeds if not 0 <= s < 2**32]
    if bad:
        problems.append(
            f"seed {bad[0]} is outside 0 .. 2**32 - 1; a run's seed is fixed so that the dense "
            "and sparse arms share their noise (for several, seeds=[0,1,2])"
        )
    if cfg.prompts is None and not cfg.prompt.strip():
        problems.append(
            "prompt is empty (an unset variable in prompt=$PROMPT?); give a prompt, or "
            "prompts=<suite or file> for several"
        )
    problems += [
        p for key, positive in LIMITS if (p := limit_problem(key, _at(cfg, key), positive=positive))
    ]
    problems += _name_problems(cfg)
    if cfg.fps < 1 or not 0 <= cfg.crf <= 51:
        problems.append(f"fps={cfg.fps} must be >= 1 and crf={cfg.crf} within 0 .. 51 (x264)")
    for name in ("block_q", "block_kv", "block_kv_compute", "vmem_limit_bytes"):
        value = cfg.kernel[name]
        if value is not None and value < 1:
            problems.append(f"kernel.{name}={value} must be positive, or null for the default")
    if problems:
        raise ValueError("; ".join(problems))


def _at(cfg: DictConfig, key: str) -> Any:
    """The value at a dotted key of the composed config."""
    return OmegaConf.select(cfg, key)


def _name_problems(cfg: DictConfig) -> list[str]:
    """A schedule name that could not name a folder: it names the run folder and its MLflow tag."""
    name = str(cfg.schedule.name)
    if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        return [
            f"schedule.name={name!r} cannot name a folder (it names the run folder): use a plain "
            "name without '/' or '\\', e.g. schedule.name=my_schedule"
        ]
    return []
