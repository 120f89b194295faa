"""One arm of a comparison: compile the denoising loop, time warm runs, decode the latents."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np
from flax import nnx

from evalharness.timing import RunTimes, time_warm_runs, timed
from models.pipeline import DenoiseLoop
from models.samplers import Sampler

log = logging.getLogger(__name__)


class NonFiniteLatents(RuntimeError):
    """The denoising loop produced NaN or Inf latents."""


@dataclass
class ArmResult:
    """What one arm produced.

    Attributes:
        label: ``dense``, ``sparse`` or ``noise_floor``.
        latents: float32 [1, 16, F, H, W] final latents.
        times: warm-run timings (None when the arm was run once, untimed).
        compile_s: ahead-of-time compilation seconds.
        warmup_s: the first (untimed) execution after compilation.
        frames: uint8 [T, H, W, 3] decoded video (set by :func:`decode_arm`).
        decode_s: VAE decoding seconds.
    """

    label: str
    latents: np.ndarray
    times: RunTimes | None
    compile_s: float
    warmup_s: float
    frames: np.ndarray | None = None
    decode_s: float = float("nan")


def run_arm(
    label: str,
    model: nnx.Module,
    sampler: Sampler,
    *,
    guidance_scale: float,
    attend: Callable | None,
    noise: jax.Array,
    context: jax.Array,
    negative_context: jax.Array | None,
    warm_runs: int,
    on_event: Callable[[str], None] = lambda message: None,
    on_step: Callable[[int], None] | None = None,
) -> ArmResult:
    """Compiles and runs one arm's denoising loop.

    Args:
        label: arm name for logs.
        model: the Wan transformer.
        sampler: the shared sampler (same schedule for every arm).
        guidance_scale: classifier-free guidance scale.
        attend: the arm's attention function (None: the model's dense default).
        noise: [1, 16, F, H, W] initial noise, identical for every arm.
        context: [1, L, text_dim] prompt embeddings.
        negative_context: [1, L, text_dim] negative-prompt embeddings, or None.
        warm_runs: timed runs after the warm-up; 0 runs the loop once, untimed.
        on_event: progress hook called with a short description of each phase.
        on_step: per-step host callback (a step bar); None keeps the loop free of callbacks.

    Returns:
        The arm's latents and timings (frames are decoded separately).

    Raises:
        NonFiniteLatents: when the final latents hold NaN or Inf.
    """
    loop = DenoiseLoop(
        model, sampler, guidance_scale=guidance_scale, attend=attend, on_step=on_step
    )
    on_event(f"{label}: compiling the {len(sampler.timesteps)}-step denoising loop")
    start = time.perf_counter()
    compiled = loop.compile(noise, context, negative_context)
    compile_s = time.perf_counter() - start
    log.info("%s: compiled in %.2f s", label, compile_s)
    on_event(f"{label}: warm-up run")
    out, warmup_s = timed(compiled, noise, context, negative_context)
    times = None
    if warm_runs > 0:
        on_event(f"{label}: {warm_runs} timed runs")
        out, times = time_warm_runs(
            compiled,
            noise,
            context,
            negative_context,
            warm_runs=warm_runs,
            steps=len(sampler.timesteps),
        )
        log.info(
            "%s: median %.3f s (min %.3f, max %.3f) over %d warm runs",
            label,
            times.median_s,
            times.min_s,
            times.max_s,
            warm_runs,
        )
    if not bool(out.finite):
        raise NonFiniteLatents(
            f"the {label} arm produced NaN or Inf latents; try dtype=float32, fewer steps, or check "
            "the checkpoint"
        )
    return ArmResult(label, np.asarray(out.latents), times, compile_s, warmup_s)


def decode_arm(arm: ArmResult, decode: Callable[[np.ndarray], np.ndarray]) -> ArmResult:
    """Decodes an arm's latents to uint8 frames in place, timing the VAE."""
    start = time.perf_counter()
    arm.frames = decode(arm.latents)
    arm.decode_s = time.perf_counter() - start
    return arm
