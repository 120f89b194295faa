"""The values no run can use, refused when the config is composed (before any work), each
message naming the key and the fix. The schemas check types and choices; this checks ranges.

Thresholds and limits (a gate threshold, a time limit, a search budget or step, in a setting or
a command-line flag) follow one rule, :func:`limit_problem`: a finite number, never negative.
NaN compares false with everything, so a NaN threshold would pass every gate and a NaN limit
would switch its check off; an infinite one means nothing either (a PSNR of uint8 frames is
>= 0, a speedup > 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

# The config's thresholds and limits: key -> whether 0 is refused.
LIMITS = (
    ("gate.min_psnr_db", False),
    ("gate.min_worst_frame_psnr_db", False),
    ("gate.max_lpips", False),
    ("gate.min_speedup", False),
    ("max_minutes", True),
)


def limit_problem(key: str, value: Any, *, positive: bool = False) -> str | None:
    """What is wrong with a threshold or limit, or None when it can be used.

    Args:
        key: the setting or flag, named in the message (``gate.min_psnr_db``, ``--min-speedup``).
        value: its value; None (unset) is fine.
        positive: whether 0 is refused too (a time budget, a grid step).

    Returns:
        A message naming ``key``, its value and what to give instead, or None.
    """
    if value is None:
        return None
    bound = "> 0" if positive else ">= 0"
    wanted = f"give a finite number {bound}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key}={value!r} is not a number; {wanted}"
    if math.isnan(value):
        return f"{key}=nan is not a number (NaN compares false, so no check would hold); {wanted}"
    if math.isinf(value):
        return f"{key}={value} is infinite; {wanted}"
    if value < 0:
        return f"{key}={value:g} is negative; {wanted}"
    if positive and value == 0:
        return f"{key}=0 must be > 0"
    return None


# ``model.checkpoint=random``: the preset at its real shapes on seeded random weights.
RANDOM_CHECKPOINT = "random"


def random_weights_gate_problem(quality: Mapping[str, float | None], speed: str) -> str | None:
    """The refusal of quality thresholds on a run on random weights, or None when none is set.

    On random weights (``model.checkpoint=random``) the videos are noise, so PSNR and SSIM say
    nothing about the schedule; the speed figures are real and stay gated.

    Args:
        quality: the quality thresholds by the name the user typed them under
            (``gate.min_psnr_db``, ``--min-psnr-db``), None where unset.
        speed: the speed threshold's name, which still applies.

    Returns:
        One line naming each set threshold to drop, or None.
    """
    named = [name for name, value in quality.items() if value is not None]
    if not named:
        return None
    shown = ", ".join(f"{name}={quality[name]:g}" for name in named)
    return (
        f"{shown}: a quality threshold on a run on random weights (model.checkpoint=random), "
        f"whose PSNR and SSIM are meaningless; drop {' and '.join(named)} ({speed} still "
        "gates its speed)"
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
    for key, positive in LIMITS:
        problem = limit_problem(key, OmegaConf.select(cfg, key), positive=positive)
        if problem:
            problems.append(problem)
    schedule_name = str(cfg.schedule.name)  # it names the run folder and its MLflow tag
    if schedule_name in ("", ".", "..") or any(c in schedule_name for c in "/\\\0"):
        problems.append(
            f"schedule.name={schedule_name!r} cannot name a folder (it names the run folder): "
            "use a plain name without '/' or '\\', e.g. schedule.name=my_schedule"
        )
    if cfg.fps < 1 or not 0 <= cfg.crf <= 51:
        problems.append(f"fps={cfg.fps} must be >= 1 and crf={cfg.crf} within 0 .. 51 (x264)")
    for name in ("block_q", "block_kv", "block_kv_compute", "vmem_limit_bytes"):
        value = cfg.kernel[name]
        if value is not None and value < 1:
            problems.append(f"kernel.{name}={value} must be positive, or null for the default")
    if problems:
        raise ValueError("; ".join(problems))


def check_random_weights_gate(cfg: Any) -> None:
    """Refuses, before any work, a quality threshold on a run on random weights.

    Args:
        cfg: the composed ``EvalConfig``.

    Raises:
        ValueError: naming each quality threshold to drop (:func:`random_weights_gate_problem`).
    """
    if not cfg.model.random_weights:
        return
    gate = cfg.gate
    quality = {"gate.min_psnr_db": gate.min_psnr_db}
    quality["gate.min_worst_frame_psnr_db"] = gate.min_worst_frame_psnr_db
    quality["gate.max_lpips"] = gate.max_lpips
    problem = random_weights_gate_problem(quality, "gate.min_speedup")
    if problem:
        raise ValueError(problem)
