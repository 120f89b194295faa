"""One arm of a comparison: compile the denoising loop, time warm runs, decode the latents.

:func:`prepare_arm` compiles and warms up an arm without timing it (and without a per-step host
callback, so nothing but the loop runs inside a timed run); :func:`time_arms_interleaved` then
times several prepared arms in round-robin rounds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime

import jax
import numpy as np
from flax import nnx

from evalharness.arms.timing import Block, Clock, RunTimes, check_warm_runs, time_interleaved
from evalharness.tracking import to_host
from models.pipeline import DenoiseLoop, DenoiseOutput
from models.samplers import Sampler

log = logging.getLogger(__name__)


class NonFiniteLatents(RuntimeError):
    """The denoising loop produced NaN or Inf latents."""


def _check_finite(label: str, out: DenoiseOutput, when: str = "") -> None:
    """Raises :class:`NonFiniteLatents` when ``out.finite`` (a device bool scalar) is False."""
    if not bool(out.finite):
        raise NonFiniteLatents(
            f"the {label} arm produced NaN or Inf latents{when}; try dtype=float32, fewer steps, "
            "or check the checkpoint"
        )


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


@dataclass
class PreparedArm:
    """An arm compiled and warmed up, ready to be timed; calling it runs the compiled loop once on
    the arm's own inputs.

    Attributes:
        label: ``dense``, ``sparse``, ``noise_floor``, ... (for logs and the result).
        compiled: the compiled loop, ``(noise, context, negative_context) -> DenoiseOutput``.
        args: its inputs: noise [1, 16, F, H, W], context [1, L, text_dim], negative context
            [1, L, text_dim] or None (arrays every arm shares).
        steps: denoising steps per run, for the per-step figure.
        compile_s: ahead-of-time compilation seconds.
        warmup_s: seconds of the first, untimed execution.
        latents: float32 [1, 16, F, H, W] latents of the warm-up run: the arm's result (the loop
            is deterministic; timed runs only measure).
    """

    label: str
    compiled: Callable[..., DenoiseOutput]
    args: tuple[jax.Array, jax.Array, jax.Array | None]
    steps: int
    compile_s: float
    warmup_s: float
    latents: np.ndarray

    def __call__(self) -> DenoiseOutput:
        """Runs the compiled loop once (asynchronously: the caller blocks on the output)."""
        return self.compiled(*self.args)

    def result(self, times: RunTimes | None) -> ArmResult:
        """The arm as an :class:`ArmResult` with ``times`` from :func:`time_arms_interleaved`
        (None for an untimed arm, e.g. the routing-recording run)."""
        return ArmResult(self.label, self.latents, times, self.compile_s, self.warmup_s)


def prepare_arm(
    label: str,
    model: nnx.Module,
    sampler: Sampler,
    *,
    guidance_scale: float,
    attend: Callable | None,
    noise: jax.Array,
    context: jax.Array,
    negative_context: jax.Array | None,
    on_event: Callable[[str], None] = lambda message: None,
    guidance_passes: str = "joint",
    timed: Callable[[str], AbstractContextManager] = lambda stage: nullcontext(),
    clock: Clock = time.perf_counter,
    block: Block = jax.block_until_ready,
) -> PreparedArm:
    """Compiles one arm's denoising loop (ahead of time, no per-step host callback) and runs it
    once, untimed, as its warm-up; an attend that records routing records in that run only.

    Args:
        label: arm name for logs.
        model: the Wan transformer.
        sampler: the shared sampler (same schedule for every arm).
        guidance_scale: classifier-free guidance scale.
        attend: the arm's attention function (None: the model's dense default).
        noise: [1, 16, F, H, W] initial noise, identical for every arm.
        context: [1, L, text_dim] prompt embeddings.
        negative_context: [1, L, text_dim] negative-prompt embeddings, or None.
        on_event: progress hook called with a short description of each phase.
        guidance_passes: ``joint`` or ``separate`` (``models.pipeline.GUIDANCE_PASSES``).
        timed: ``timed("compile")`` and ``timed("warm-up")`` wrap the two stages (the run's
            phase ledger).
        clock, block: monotonic seconds and the wait for the warm-up's outputs (tests inject
            them).

    Raises:
        NonFiniteLatents: when the warm-up's latents hold NaN or Inf.
    """
    loop = DenoiseLoop(
        model,
        sampler,
        guidance_scale=guidance_scale,
        attend=attend,
        on_step=None,
        guidance_passes=guidance_passes,
    )
    with timed("compile"):
        on_event(f"{label}: compiling the {len(sampler.timesteps)}-step denoising loop")
        start = clock()
        compiled = loop.compile(noise, context, negative_context)
        compile_s = clock() - start
        log.info("%s: compiled in %.2f s", label, compile_s)
    args = (noise, context, negative_context)
    with timed("warm-up"):
        warmup_s, latents = _warm_up(label, compiled, args, on_event, clock, block)
    return PreparedArm(label, compiled, args, len(sampler.timesteps), compile_s, warmup_s, latents)


def rebind_arm(
    arm: PreparedArm,
    args: tuple[jax.Array, jax.Array, jax.Array | None],
    *,
    on_event: Callable[[str], None] = lambda message: None,
    clock: Clock = time.perf_counter,
    block: Block = jax.block_until_ready,
) -> PreparedArm:
    """The arm's compiled loop bound to other inputs of the same shapes (another prompt or
    seed of a suite), run once on them untimed: no recompilation.

    Args:
        arm: a prepared arm.
        args: new :attr:`PreparedArm.args`, with the shapes ``arm`` was compiled for.
        on_event, clock, block: as :func:`prepare_arm` takes them.

    Returns:
        The arm with the new inputs, their warm-up seconds and latents (``compile_s`` is the
        shared compilation's).

    Raises:
        ValueError: an input's shape differs from the compiled one's.
        NonFiniteLatents: when the warm-up's latents hold NaN or Inf.
    """
    for name, new, old in zip(
        ("noise", "context", "negative context"), args, arm.args, strict=True
    ):
        if (new is None) != (old is None) or (new is not None and new.shape != old.shape):
            shapes = [None if x is None else tuple(x.shape) for x in (new, old)]
            raise ValueError(
                f"{arm.label}: the {name} has shape {shapes[0]}, but the loop was compiled for "
                f"{shapes[1]}; every pair of a suite needs the same shapes"
            )
    warmup_s, latents = _warm_up(arm.label, arm.compiled, args, on_event, clock, block)
    return dataclasses.replace(arm, args=args, warmup_s=warmup_s, latents=latents)


def _warm_up(
    label: str,
    compiled: Callable[..., DenoiseOutput],
    args: tuple[jax.Array, jax.Array, jax.Array | None],
    on_event: Callable[[str], None],
    clock: Clock,
    block: Block,
) -> tuple[float, np.ndarray]:
    """Runs the compiled loop once, untimed; returns (seconds, host latents)."""
    records = getattr(compiled, "records", False)  # a loop that records routing does it here
    on_event(f"{label}: warm-up run" + (", recording the routing" if records else ""))
    start = clock()
    out = compiled(*args, record=True) if records else compiled(*args)
    block(out)
    warmup_s = clock() - start
    log.info("%s: warm-up in %.2f s", label, warmup_s)
    _check_finite(label, out, " in its warm-up run")
    # Host copy: the result outlives the device output, which is dropped here.
    return warmup_s, to_host(out.latents)  # gathered from every process on several hosts


def _clock_time(epoch_s: float | None) -> str:
    return "?" if epoch_s is None else datetime.fromtimestamp(epoch_s).strftime("%H:%M:%S")


def time_arms_interleaved(
    arms: dict[str, PreparedArm],
    warm_runs: int,
    *,
    clock: Clock = time.perf_counter,
    block: Block = jax.block_until_ready,
    wall_clock: Clock = time.time,
    on_event: Callable[[str], None] = lambda message: None,
) -> dict[str, RunTimes]:
    """Times prepared arms with :func:`evalharness.arms.timing.time_interleaved`: each round runs
    every arm once, in dict order (dense, sparse, noise floor, dense, ...), so drift in the
    machine's load lands on every arm alike; each output's finiteness is read after its clock
    stops.

    Args:
        arms: name -> prepared arm (at least one); the names key the result.
        warm_runs: timed runs per arm (>= 1), i.e. the number of rounds.
        clock, block, wall_clock: as ``time_interleaved`` takes them (tests inject them).
        on_event: progress hook, called before the first round and after each round.

    Returns:
        name -> the arm's run times, in round order, with their wall-clock window.

    Raises:
        ValueError: ``warm_runs`` < 1 or no arms.
        NonFiniteLatents: a timed run produced NaN or Inf latents.
    """
    check_warm_runs(warm_runs)
    if not arms:
        raise ValueError("nothing to time: no arms were given")
    order = ", ".join(arms)
    on_event(f"timing {order} interleaved: {warm_runs} rounds")

    def check(name: str, out: DenoiseOutput) -> None:
        _check_finite(arms[name].label, out, " in a timed run")

    times = time_interleaved(
        arms,
        warm_runs,
        steps={name: arm.steps for name, arm in arms.items()},
        check=check,
        clock=clock,
        block=block,
        wall_clock=wall_clock,
        on_round=lambda done, runs: on_event(
            f"timed round {done}/{warm_runs}: "
            + ", ".join(f"{name} {seconds[-1]:.2f} s" for name, seconds in runs.items())
        ),
    )
    for name, t in times.items():
        log.info(
            f"{arms[name].label}: median {t.median_s:.3f} s (min {t.min_s:.3f}, max {t.max_s:.3f})"
            f" over {warm_runs} interleaved runs, timed {_clock_time(t.timed_from)}-"
            f"{_clock_time(t.timed_until)}"
        )
    return times


def decode_arm(arm: ArmResult, decode: Callable[[np.ndarray], np.ndarray]) -> ArmResult:
    """Decodes an arm's latents to uint8 frames in place, timing the VAE."""
    start = time.perf_counter()
    arm.frames = decode(arm.latents)
    arm.decode_s = time.perf_counter() - start
    return arm
