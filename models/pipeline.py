"""The denoising loop: classifier-free guidance around a velocity model, driven by a sampler.

``DenoiseLoop`` compiles the whole loop once per input shape: the steps are a ``lax.fori_loop`` whose
traced index reaches both the sampler tables and the injected attention function (``attend(...,
step=i, layer=...)``), so 1 step and 50 steps cost one trace each. The conditional and unconditional
passes run as one model call on a batch of 2·B. ``denoise_reference`` is the plain eager loop (two
separate model calls per step, as diffusers' Wan pipeline does) that the tests use as the oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from models.attention import AttendFn
from models.loop_attend import (
    at_batch_offset,
    attention_heads,
    collects_routing,
    load_routing,
    record_flag,
    records_routing,
    step_phases_of,
)
from models.samplers import Sampler

# Wan 2.1's default classifier-free guidance scale.
DEFAULT_GUIDANCE_SCALE = 5.0


class DenoiseOutput(NamedTuple):
    """Result of a denoising run.

    Attributes:
        latents: [B, C, F, H, W] float32 final latents.
        finite: bool scalar, False when any latent is NaN or Inf (computed on device; cheap to read).
        routing: where the loop returns its attend's routing (``RoutingOutput``): int8 flags and
            float32 spatial and temporal errors, [steps, layers, batch, heads] each; else None.
    """

    latents: jax.Array
    finite: jax.Array
    routing: tuple[jax.Array, jax.Array, jax.Array] | None = None


def _check_guidance(guidance_scale: float) -> float:
    if isinstance(guidance_scale, bool) or not isinstance(guidance_scale, int | float):
        raise ValueError(f"guidance_scale must be a float >= 1, got {guidance_scale!r}")
    if not math.isfinite(guidance_scale) or guidance_scale < 1.0:
        raise ValueError(
            f"guidance_scale must be a finite float >= 1 (1 disables guidance, Wan uses "
            f"{DEFAULT_GUIDANCE_SCALE}), got {guidance_scale}"
        )
    return float(guidance_scale)


def _check_inputs(latents: Any, context: Any, negative_context: Any) -> None:
    """Shape checks shared by the compiled and the reference loop (arrays or ShapeDtypeStructs)."""
    if len(latents.shape) != 5:
        raise ValueError(f"latents must be [B, C, F, H, W], got shape {tuple(latents.shape)}")
    if len(context.shape) != 3 or context.shape[0] != latents.shape[0]:
        raise ValueError(
            f"context must be [B, L, text_dim] with B = {latents.shape[0]} (the latents' batch), "
            f"got shape {tuple(context.shape)}"
        )
    if negative_context is not None and tuple(negative_context.shape) != tuple(context.shape):
        raise ValueError(
            f"negative_context must have the context's shape {tuple(context.shape)} (pad both to "
            f"the same text length), got {tuple(negative_context.shape)}"
        )


# How the two classifier-free guidance passes of a step run: ``joint`` as one batch of 2B (half
# the weight reads), ``separate`` as two batch-B calls one after the other (half the activations:
# what lets the largest videos fit one device). Same FLOPs either way.
GUIDANCE_PASSES = ("joint", "separate")


def forward_batch(guided: bool, guidance_passes: str, batch: int = 1) -> int:
    """Samples in one model call: ``2 * batch`` for joint guidance, else ``batch``.

    Args:
        guided: whether classifier-free guidance runs (:func:`uses_guidance`).
        guidance_passes: one of :data:`GUIDANCE_PASSES`.
        batch: B, videos denoised together.

    Raises:
        ValueError: an unknown ``guidance_passes``.
    """
    if guidance_passes not in GUIDANCE_PASSES:
        raise ValueError(f"guidance_passes={guidance_passes!r}; use one of {GUIDANCE_PASSES}")
    return 2 * batch if guided and guidance_passes == "joint" else batch


def uses_guidance(guidance_scale: float, negative_context: Any) -> bool:
    """Whether classifier-free guidance runs (a batch of 2B per step).

    Guidance is off at scale 1 (the guided output equals the conditional one) and without a
    negative context.

    Args:
        guidance_scale: the guidance scale g.
        negative_context: the unconditional context (or the negative prompt), or None.
    """
    return guidance_scale != 1.0 and negative_context is not None


def _combine(cond: jax.Array, uncond: jax.Array, guidance_scale: float) -> jax.Array:
    """Classifier-free guidance ``uncond + g * (cond - uncond)``, in float32."""
    cond = cond.astype(jnp.float32)
    uncond = uncond.astype(jnp.float32)
    return uncond + guidance_scale * (cond - uncond)


def _model_timestep(sampler: Sampler, i: jax.Array | int, batch: int) -> jax.Array:
    """The model's timestep for step ``i``: float32 [batch]."""
    return jnp.full((batch,), jnp.asarray(sampler.timesteps)[i], jnp.float32)


class CompiledDenoise:
    """An ahead-of-time compiled loop bound to the model weights it was built with.

    Attributes:
        compiled: the ``jax.stages.Compiled`` executable (for ``cost_analysis``/``memory_analysis``).
        records: whether its attend records routing, in the runs given ``record=True``: by
            callback behind a runtime flag, or into ``recorder`` from the routing the loop
            returns.
    """

    def __init__(
        self,
        compiled: jax.stages.Compiled,
        params: nnx.State,
        *,
        records: bool = False,
        recorder: Any = None,
    ) -> None:
        self.compiled = compiled
        self._params = params
        self.records = records or recorder is not None
        self._flagged = records  # the loop takes a runtime ``record`` flag (callbacks)
        self._recorder = recorder  # where a recording run's returned routing goes

    def __call__(
        self,
        latents: jax.Array,
        context: jax.Array,
        negative_context: jax.Array | None = None,
        *,
        record: bool = False,
    ) -> DenoiseOutput:
        """Runs the compiled loop; arguments must match the shapes it was compiled for.
        ``record``: whether a loop whose attend records routing records in this run."""
        flag = record_flag(self._flagged, record)
        out = self.compiled(self._params, latents, context, negative_context, flag)
        if record:
            load_routing(self._recorder, out)
        return out


class DenoiseLoop:
    """The compiled denoising loop for one model, sampler, guidance scale and attention function.

    The model's weights are captured (``nnx.split``) when the loop is built and passed to the
    compiled function as arguments, not baked in as constants. Build a new loop after changing them.

    Attributes:
        sampler: the sampler (its step count fixes the loop length).
        guidance_scale: classifier-free guidance scale (1 disables guidance).
        attend: self-attention function handed to the model, or None for the model's dense default.
        trace_count: how many times the loop has been traced (one per distinct input signature).
    """

    def __init__(
        self,
        model: nnx.Module,
        sampler: Sampler,
        *,
        guidance_scale: float = DEFAULT_GUIDANCE_SCALE,
        attend: AttendFn | None = None,
        on_step: Callable[[int], None] | None = None,
        guidance_passes: str = "joint",
    ) -> None:
        """Builds the loop (nothing is traced or compiled yet).

        Args:
            model: velocity model, ``model(latents, timestep, context, attend=..., step=...)``.
            sampler: from ``models.samplers.make_sampler``.
            guidance_scale: finite float >= 1.
            attend: ``attend(q, k, v, *, step, layer)``, or None. With separate guidance passes,
                an attend that records per-sample data (routing) gives the unconditional pass
                ``attend.at_batch_offset(offset)`` (a traced int32 scalar, B for that pass), so
                its records land beside the conditional ones.
            on_step: called on the host with each finished step's index (a progress bar). It is a
                ``jax.debug.callback`` per step, so leave it None where timings must be exact.
            guidance_passes: one of :data:`GUIDANCE_PASSES`.

        Raises:
            ValueError: on a bad ``guidance_scale`` or ``guidance_passes``.
        """
        self.sampler = sampler
        self.guidance_scale = _check_guidance(guidance_scale)
        forward_batch(True, guidance_passes)  # validates the name
        self.guidance_passes = guidance_passes
        self.attend = attend
        self.on_step = on_step
        self._graphdef, self._params = nnx.split(model)
        self._collects = collects_routing(attend, model, guidance_passes)
        self._heads = attention_heads(model)
        self.trace_count = 0
        self._jitted = jax.jit(self._run)

    @property
    def cache_size(self) -> int:
        """Number of executables in the jit cache (JAX's own count, beside ``trace_count``)."""
        return self._jitted._cache_size()

    def _run(
        self,
        params: nnx.State,
        latents: jax.Array,
        context: jax.Array,
        negative_context: jax.Array | None,
        record: jax.Array | None = None,
    ) -> DenoiseOutput:
        # Runs at trace time only, so it counts compilations, not executions.
        self.trace_count += 1
        sampler = self.sampler
        # A recording attend records only in the runs whose ``record`` flag is True.
        attend = self.attend if record is None else self.attend.recording_when(record)
        guided = uses_guidance(self.guidance_scale, negative_context)
        routing = None  # where the loop returns the routing (``RoutingOutput``)
        if self._collects:
            batch = latents.shape[0] * (2 if guided else 1)
            routing = self.attend.routing_output(batch, self._heads)
        velocity = self._velocity(latents.shape[0], context, negative_context)

        def body_with(attend: AttendFn | None) -> Callable[[jax.Array, Any], Any]:
            def body(i: jax.Array, carry: tuple[Any, Any]) -> tuple[Any, Any]:
                state, routed = carry
                model = nnx.merge(self._graphdef, params)
                cells: list = []  # the sparse cells' routing, appended while this body traces
                called = attend if routing is None else attend.collecting_into(cells)
                state = sampler.step(state, velocity(model, sampler.sample(state), i, called), i)
                if routing is not None:
                    routed = routing.write(routed, cells, i)
                if self.on_step is not None:
                    jax.debug.callback(lambda step: self.on_step(int(step)), i)
                return state, routed

            return body

        carry = (sampler.init(latents), None if routing is None else routing.initial())
        # One loop per phase of steps the attention tells apart (its dense steps, then its sparse
        # ones): each phase's cells are decided when tracing, with no branch per attention call.
        for start, stop, phase_attend in step_phases_of(attend, sampler.num_steps):
            carry = jax.lax.fori_loop(start, stop, body_with(phase_attend), carry)
        out = sampler.sample(carry[0])
        return DenoiseOutput(latents=out, finite=jnp.all(jnp.isfinite(out)), routing=carry[1])

    def _velocity(
        self, batch: int, context: jax.Array, negative_context: jax.Array | None
    ) -> Callable[..., jax.Array]:
        """``velocity(model, x, i, attend)``: the guided velocity of step ``i`` (traced)."""
        sampler, scale = self.sampler, self.guidance_scale
        guided = uses_guidance(scale, negative_context)
        ctx = context
        if guided and self.guidance_passes == "joint":
            # One model call per step on [cond; uncond]: half the weight reads of two calls.
            ctx = jnp.concatenate([context, negative_context], axis=0)
        elif guided:
            passes_ctx = jnp.stack([context, negative_context])  # [2, B, L, text_dim]

        def velocity(
            model: nnx.Module, x: jax.Array, i: jax.Array, attend: AttendFn | None
        ) -> jax.Array:
            if guided and self.guidance_passes == "separate":
                t = _model_timestep(sampler, i, batch)

                def one_pass(inputs: tuple[jax.Array, jax.Array]) -> jax.Array:
                    ctx_p, offset = inputs
                    shifted = at_batch_offset(attend, offset)
                    return model(x, t, ctx_p, attend=shifted, step=i)

                # A loop of two passes: one body, so every backend runs them one after the other
                # and reuses the first pass's activations' memory for the second.
                offsets = jnp.asarray([0, batch], jnp.int32)  # where each pass's samples sit
                cond, uncond = jax.lax.map(one_pass, (passes_ctx, offsets))
                return _combine(cond, uncond, scale)
            x_in = jnp.concatenate([x, x], axis=0) if guided else x
            t = _model_timestep(sampler, i, x_in.shape[0])
            v = model(x_in, t, ctx, attend=attend, step=i)
            return _combine(v[:batch], v[batch:], scale) if guided else v

        return velocity

    def lower(
        self, latents: Any, context: Any, negative_context: Any | None = None
    ) -> jax.stages.Lowered:
        """Traces and lowers without compiling (arrays or ``jax.ShapeDtypeStruct`` accepted).

        Args:
            latents: [B, C, F, H, W] initial noise.
            context: [B, L, text_dim] prompt embeddings.
            negative_context: [B, L, text_dim] negative-prompt embeddings, or None.

        Raises:
            ValueError: on inconsistent shapes.
        """
        _check_inputs(latents, context, negative_context)
        record = record_flag(self._flagged, False)
        return self._jitted.lower(self._params, latents, context, negative_context, record)

    @property
    def _flagged(self) -> bool:
        """Whether the loop takes a runtime ``record`` flag (its attend records by callback)."""
        return records_routing(self.attend) and not self._collects

    def compile(
        self, latents: Any, context: Any, negative_context: Any | None = None
    ) -> CompiledDenoise:
        """Ahead-of-time compiles for these shapes so callers can time compile and run apart.

        Args: as ``lower``.

        Returns:
            A callable ``(latents, context, negative_context) -> DenoiseOutput``.
        """
        compiled = self.lower(latents, context, negative_context).compile()
        recorder = self.attend.recorder if self._collects else None
        return CompiledDenoise(compiled, self._params, records=self._flagged, recorder=recorder)

    def __call__(
        self, latents: jax.Array, context: jax.Array, negative_context: jax.Array | None = None
    ) -> DenoiseOutput:
        """Denoises ``latents`` (compiling on the first call for these shapes).

        Args:
            latents: [B, C, F, H, W] initial noise.
            context: [B, L, text_dim] prompt embeddings.
            negative_context: [B, L, text_dim] negative-prompt embeddings; None (or a guidance
                scale of 1) skips the unconditional pass.

        Returns:
            ``DenoiseOutput(latents [B, C, F, H, W] float32, finite bool scalar)``.

        Raises:
            ValueError: on inconsistent shapes.
        """
        _check_inputs(latents, context, negative_context)
        record = record_flag(self._flagged, True)  # an uncompiled call always records
        out = self._jitted(self._params, latents, context, negative_context, record)
        if self._collects:
            load_routing(self.attend.recorder, out)
        return out


def denoise(
    model: nnx.Module,
    latents: jax.Array,
    context: jax.Array,
    negative_context: jax.Array | None,
    sampler: Sampler,
    guidance_scale: float = DEFAULT_GUIDANCE_SCALE,
    attend: AttendFn | None = None,
) -> DenoiseOutput:
    """One-shot denoising through a fresh ``DenoiseLoop`` (compiles on every call).

    For repeated or timed runs build a ``DenoiseLoop`` once and call it (or ``.compile()`` it).

    Args:
        model: velocity model.
        latents: [B, C, F, H, W] initial noise.
        context: [B, L, text_dim] prompt embeddings.
        negative_context: [B, L, text_dim] negative-prompt embeddings, or None.
        sampler: from ``models.samplers.make_sampler``.
        guidance_scale: finite float >= 1.
        attend: self-attention function, or None for dense.

    Returns:
        ``DenoiseOutput``.
    """
    loop = DenoiseLoop(model, sampler, guidance_scale=guidance_scale, attend=attend)
    return loop(latents, context, negative_context)


def denoise_reference(
    model: nnx.Module,
    latents: jax.Array,
    context: jax.Array,
    negative_context: jax.Array | None,
    sampler: Sampler,
    guidance_scale: float = DEFAULT_GUIDANCE_SCALE,
    attend: AttendFn | None = None,
) -> DenoiseOutput:
    """Eager Python loop with separate conditional and unconditional calls: the test oracle.

    Same arguments and result as ``denoise``; ``attend`` gets ``step`` as an int32 scalar array.
    """
    scale = _check_guidance(guidance_scale)
    _check_inputs(latents, context, negative_context)
    guided = uses_guidance(scale, negative_context)
    batch = latents.shape[0]
    state = sampler.init(latents)
    for k in range(sampler.num_steps):
        step = jnp.asarray(k, jnp.int32)
        x = sampler.sample(state)
        t = _model_timestep(sampler, k, batch)
        v = model(x, t, context, attend=attend, step=step)
        if guided:
            v_uncond = model(x, t, negative_context, attend=attend, step=step)
            v = _combine(v, v_uncond, scale)
        state = sampler.step(state, v, k)
    out = sampler.sample(state)
    return DenoiseOutput(latents=out, finite=jnp.all(jnp.isfinite(out)))
