"""Denoising loop: compiled once, guidance, step index reaching ``attend``, AOT path, bad input."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models.pipeline import (
    GUIDANCE_PASSES,
    DenoiseLoop,
    DenoiseOutput,
    denoise,
    denoise_reference,
    forward_batch,
)
from models.samplers import make_sampler
from tests.helpers.numerics import assert_allclose

B, C, F, H, W = 1, 4, 2, 2, 3
L, TEXT_DIM = 3, 5


class StandInModel(nnx.Module):
    """A small velocity model with the transformer's call signature.

    Tokens go through one injected self-attention call (so ``attend`` sees the batch and the step),
    plus a context term (so conditional and unconditional outputs differ) and a timestep term.
    """

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        k = rngs.params
        self.wq = nnx.Param(jax.random.normal(k(), (C, C)) * 0.5)
        self.wk = nnx.Param(jax.random.normal(k(), (C, C)) * 0.5)
        self.wv = nnx.Param(jax.random.normal(k(), (C, C)) * 0.5)
        self.wc = nnx.Param(jax.random.normal(k(), (TEXT_DIM, C)) * 0.5)

    def __call__(self, latents, timestep, context, attend=None, step=0):
        attend = _plain_attention if attend is None else attend
        b = latents.shape[0]
        tokens = latents.reshape(b, C, -1).transpose(0, 2, 1)  # [B, N, C]
        q, k, v = (tokens @ w[...] for w in (self.wq, self.wk, self.wv))
        att = attend(q[:, :, None], k[:, :, None], v[:, :, None], step=step, layer=0)[:, :, 0]
        att = att.transpose(0, 2, 1).reshape(latents.shape)
        text = jnp.tanh(context.mean(axis=1) @ self.wc[...])  # [B, C]
        time = (timestep / 1000.0)[:, None, None, None, None]
        return 0.5 * att + text[:, :, None, None, None] - time * latents


def _plain_attention(q, k, v, *, step, layer):
    del step, layer
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


class RecordingAttention:
    """Plain attention scaled by the step (so a wrong step changes the result); records its calls."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, q, k, v, *, step, layer):
        self.calls.append(
            {
                "batch": q.shape[0],
                "traced": isinstance(step, jax.core.Tracer),
                "dtype": jnp.asarray(step).dtype,
                "layer": layer,
            }
        )
        return _plain_attention(q, k, v, step=step, layer=layer) * (1.0 + 0.1 * step)


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    latents = jnp.asarray(rng.standard_normal((B, C, F, H, W)), jnp.float32)
    context = jnp.asarray(rng.standard_normal((B, L, TEXT_DIM)), jnp.float32)
    negative = jnp.asarray(rng.standard_normal((B, L, TEXT_DIM)), jnp.float32)
    return latents, context, negative


@pytest.fixture(scope="module")
def model() -> StandInModel:
    return StandInModel(rngs=nnx.Rngs(0))


@pytest.mark.parametrize("steps", [1, 40])
def test_loop_compiles_once(model: StandInModel, steps: int) -> None:
    attend = RecordingAttention()
    loop = DenoiseLoop(model, make_sampler("unipc", steps, 5.0), guidance_scale=5.0, attend=attend)
    latents, context, negative = _inputs(0)
    first = loop(latents, context, negative)
    assert loop.trace_count == 1
    # The model (hence attend) is traced once for all steps: the step index is a loop variable.
    assert len(attend.calls) == 1
    latents2, _, _ = _inputs(1)
    second = loop(latents2, context, negative)
    assert loop.trace_count == 1 and loop.cache_size == 1
    assert not np.allclose(np.asarray(first.latents), np.asarray(second.latents))
    ref = denoise_reference(model, latents2, context, negative, loop.sampler, 5.0, attend)
    assert_allclose(second.latents, ref.latents, atol=1e-5, rtol=1e-5)


def test_attend_gets_traced_int32_step_and_doubled_batch(model: StandInModel) -> None:
    attend = RecordingAttention()
    loop = DenoiseLoop(model, make_sampler("euler", 3, 3.0), guidance_scale=4.0, attend=attend)
    loop(*_inputs())
    (call,) = attend.calls
    assert call == {"batch": 2 * B, "traced": True, "dtype": jnp.int32, "layer": 0}


@pytest.mark.parametrize("name", ["unipc", "euler"])
@pytest.mark.parametrize("guided", [True, False])
@pytest.mark.parametrize("passes", GUIDANCE_PASSES)
def test_compiled_loop_matches_eager_reference(
    model: StandInModel, name: str, guided, passes: str
) -> None:
    # The reference makes separate conditional/unconditional calls and passes concrete steps.
    sampler = make_sampler(name, 5, 5.0)
    latents, context, negative = _inputs(2)
    negative = negative if guided else None
    attend = RecordingAttention()
    loop = DenoiseLoop(model, sampler, guidance_scale=5.0, attend=attend, guidance_passes=passes)
    out = loop(latents, context, negative)
    ref = denoise_reference(model, latents, context, negative, sampler, 5.0, attend)
    assert isinstance(out, DenoiseOutput) and bool(out.finite)
    assert out.latents.shape == latents.shape and out.latents.dtype == jnp.float32
    assert_allclose(out.latents, ref.latents, atol=1e-5, rtol=1e-5)


class OffsetRecordingAttention(RecordingAttention):
    """Plain attention that records, on the host, the batch offset each call was given."""

    def __init__(self, offset=0) -> None:
        super().__init__()
        self.offset = offset
        self.seen: list[int] = []

    def at_batch_offset(self, offset):
        shifted = OffsetRecordingAttention(offset)
        shifted.calls, shifted.seen = self.calls, self.seen  # one record for every copy
        return shifted

    def __call__(self, q, k, v, *, step, layer):
        jax.debug.callback(lambda o: self.seen.append(int(o)), self.offset)
        return super().__call__(q, k, v, step=step, layer=layer)


def test_separate_passes_run_batch_b_twice_and_tell_the_attend_where_each_pass_sits(
    model: StandInModel,
) -> None:
    attend = OffsetRecordingAttention()
    loop = DenoiseLoop(
        model,
        make_sampler("euler", 3, 3.0),
        guidance_scale=4.0,
        attend=attend,
        guidance_passes="separate",
    )
    out = loop(*_inputs())
    jax.effects_barrier()
    (call,) = attend.calls  # one traced body for both passes
    assert call["batch"] == B
    assert attend.seen == [0, B] * 3  # cond then uncond, every step
    joint = DenoiseLoop(
        model, make_sampler("euler", 3, 3.0), guidance_scale=4.0, attend=RecordingAttention()
    )(*_inputs())
    assert_allclose(out.latents, joint.latents, atol=1e-5, rtol=1e-5)


def test_separate_passes_hold_about_half_the_activations_of_the_joint_batch() -> None:
    # Compile only (nothing runs): the tiny transformer at 9,216 tokens with the flash-style B0
    # executor, so the activations (which scale with the batch) dominate the temporaries.
    from kernels.plans.tiles import BlockSizes
    from kernels.policy.attention_policy import make_dense_attend
    from models.config import get_transformer_config
    from models.transformer import WanTransformer

    cfg = get_transformer_config("tiny-planted")
    wan = WanTransformer(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.float32)
    attend = make_dense_attend("b0", backend="xla", block_sizes=BlockSizes(256, 256))
    latents = jax.ShapeDtypeStruct((1, cfg.in_channels, 9, 64, 64), jnp.float32)
    context = jax.ShapeDtypeStruct((1, 16, cfg.text_dim), jnp.float32)
    temp = {}
    for passes in GUIDANCE_PASSES:
        loop = DenoiseLoop(
            wan, make_sampler("unipc", 2, 5.0), attend=attend, guidance_passes=passes
        )
        analysis = loop.compile(latents, context, context).compiled.memory_analysis()
        temp[passes] = analysis.temp_size_in_bytes
    assert temp["separate"] < 0.75 * temp["joint"], temp  # measured 235 vs 378 MiB


def test_unknown_guidance_passes_name_the_choices(model: StandInModel) -> None:
    with pytest.raises(ValueError, match=r"guidance_passes='twice'.*joint.*separate"):
        DenoiseLoop(model, make_sampler("euler", 3, 3.0), guidance_passes="twice")
    assert forward_batch(True, "joint", 3) == 6 and forward_batch(True, "separate", 3) == 3
    assert forward_batch(False, "joint") == 1


def test_guidance_combination_by_hand(model: StandInModel) -> None:
    # One Euler step written out: x1 = x0 + (sigma1 - sigma0) * (v_u + g (v_c - v_u)).
    sampler = make_sampler("euler", 1, 3.0)
    latents, context, negative = _inputs(3)
    g = 6.5
    t = jnp.full((B,), sampler.timesteps[0], jnp.float32)
    v_c = model(latents, t, context)
    v_u = model(latents, t, negative)
    expected = latents + (sampler.sigmas[1] - sampler.sigmas[0]) * (v_u + g * (v_c - v_u))
    out = denoise(model, latents, context, negative, sampler, guidance_scale=g)
    assert_allclose(out.latents, expected, atol=1e-5, rtol=1e-5)
    # Guidance must matter for this model, or the check above could not fail.
    unguided = denoise(model, latents, context, None, sampler)
    assert not np.allclose(np.asarray(out.latents), np.asarray(unguided.latents), atol=1e-3)


@pytest.mark.parametrize(("scale", "with_negative"), [(1.0, True), (5.0, False)])
def test_no_unconditional_pass_without_guidance(model, scale: float, with_negative: bool) -> None:
    sampler = make_sampler("unipc", 4, 3.0)
    latents, context, negative = _inputs(4)
    attend = RecordingAttention()
    loop = DenoiseLoop(model, sampler, guidance_scale=scale, attend=attend)
    out = loop(latents, context, negative if with_negative else None)
    assert [c["batch"] for c in attend.calls] == [B]
    cond_only = denoise_reference(model, latents, context, None, sampler, 1.0, attend)
    assert_allclose(out.latents, cond_only.latents, atol=1e-5, rtol=1e-5)


def test_ahead_of_time_compile_matches_jit(model: StandInModel) -> None:
    loop = DenoiseLoop(model, make_sampler("unipc", 6, 5.0), guidance_scale=5.0)
    latents, context, negative = _inputs(5)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (latents, context, negative)]
    compiled = loop.compile(*structs)
    assert loop.trace_count == 1
    a = compiled(latents, context, negative)
    b = compiled(_inputs(6)[0], context, negative)
    assert loop.trace_count == 1
    assert_allclose(a.latents, loop(latents, context, negative).latents, atol=1e-6, rtol=1e-6)
    assert not np.allclose(np.asarray(a.latents), np.asarray(b.latents))
    assert "while" in loop.lower(latents, context, negative).as_text()


def test_on_step_reports_every_step_without_changing_the_result(model: StandInModel) -> None:
    seen: list[int] = []
    sampler = make_sampler("unipc", 5, 5.0)
    latents, context, negative = _inputs(7)
    with_progress = DenoiseLoop(model, sampler, guidance_scale=5.0, on_step=seen.append)
    out = with_progress(latents, context, negative)
    jax.effects_barrier()
    assert seen == [0, 1, 2, 3, 4]
    plain = DenoiseLoop(model, sampler, guidance_scale=5.0)(latents, context, negative)
    assert_allclose(out.latents, plain.latents, atol=0, rtol=0)


def test_non_finite_latents_are_flagged(model: StandInModel) -> None:
    latents, context, negative = _inputs(7)
    sampler = make_sampler("unipc", 2, 5.0)
    assert bool(denoise(model, latents, context, negative, sampler).finite)
    bad_context = context.at[0, 0, 0].set(jnp.nan)
    out = denoise(model, latents, bad_context, negative, sampler)
    assert not bool(out.finite)
    assert out.finite.shape == () and out.finite.dtype == jnp.bool_


@pytest.mark.parametrize("scale", [0.5, 0.0, -2.0, math.nan, math.inf, "5", True])
def test_bad_guidance_scale(model: StandInModel, scale) -> None:
    with pytest.raises(ValueError, match="guidance_scale"):
        DenoiseLoop(model, make_sampler("euler", 2, 3.0), guidance_scale=scale)


def test_bad_shapes(model: StandInModel) -> None:
    loop = DenoiseLoop(model, make_sampler("euler", 2, 3.0))
    latents, context, negative = _inputs()
    with pytest.raises(ValueError, match="latents must be"):
        loop(latents[0], context, negative)
    with pytest.raises(ValueError, match="context must be"):
        loop(latents, jnp.concatenate([context, context]), negative)
    with pytest.raises(ValueError, match="negative_context must have"):
        loop(latents, context, negative[:, :2])
    with pytest.raises(ValueError, match="context must be"):
        denoise_reference(model, latents, context[0], None, loop.sampler)
    assert loop.trace_count == 0


def test_tiny_wan_transformer_denoises_like_the_reference() -> None:
    from models.config import get_transformer_config
    from models.transformer import WanTransformer

    cfg = get_transformer_config("tiny-planted")
    wan = WanTransformer(cfg, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.float32)
    keys = jax.random.split(jax.random.key(0), 3)
    latents = jax.random.normal(keys[0], (1, cfg.in_channels, 2, 4, 4))
    context = jax.random.normal(keys[1], (1, 8, cfg.text_dim))
    negative = jax.random.normal(keys[2], (1, 8, cfg.text_dim))
    sampler = make_sampler("unipc", 2, 5.0)
    loop = DenoiseLoop(wan, sampler, guidance_scale=5.0)
    out = loop(latents, context, negative)
    loop(latents * 0.5, context, negative)
    assert loop.trace_count == 1 and bool(out.finite)
    ref = denoise_reference(wan, latents, context, negative, sampler, 5.0)
    assert_allclose(out.latents, ref.latents, atol=1e-5, rtol=1e-5)
