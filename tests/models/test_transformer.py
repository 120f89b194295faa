"""Unit tests of the Wan transformer port: config, RoPE, embeddings, attention contract, dtypes."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models.attention import dense_attention
from models.config import (
    WanTransformerConfig,
    config_differences,
    get_transformer_config,
    transformer_config_names,
)
from models.embeddings import timestep_embedding
from models.rope import apply_rope, rope_axis_dims, rope_tables
from models.transformer import WanTransformer
from tests.helpers.numerics import assert_allclose

# A config smaller than "tiny-planted" keeps these tests quick; head_dim 32 exercises an uneven
# RoPE split.
SMALL = WanTransformerConfig(
    num_attention_heads=2,
    attention_head_dim=32,
    ffn_dim=64,
    num_layers=2,
    text_dim=24,
    text_len=8,
    rope_max_seq_len=64,
)


def _inputs(cfg, batch=2, grid=(3, 4, 6), seed=0, text_len=5):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    latents = jax.random.normal(k1, (batch, cfg.in_channels, *grid), jnp.float32)
    timestep = jax.random.uniform(k2, (batch,), minval=0.0, maxval=1000.0)
    context = jax.random.normal(k3, (batch, text_len, cfg.text_dim), jnp.float32)
    return latents, timestep, context


@pytest.fixture(scope="module")
def small_model():
    return WanTransformer(SMALL, rngs=nnx.Rngs(0))


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layers", "heads", "dim", "ffn", "text_dim"),
    [
        ("wan2.1-t2v-1.3b", 30, 12, 1536, 8960, 4096),
        ("wan2.1-t2v-14b", 40, 40, 5120, 13824, 4096),
        ("tiny-planted", 2, 4, 256, 512, 64),
    ],
)
def test_presets(name, layers, heads, dim, ffn, text_dim):
    cfg = get_transformer_config(name)
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.dim, cfg.ffn_dim, cfg.text_dim) == (
        layers,
        heads,
        dim,
        ffn,
        text_dim,
    )
    assert cfg.patch_size == (1, 2, 2) and cfg.freq_dim == 256 and cfg.eps == 1e-6
    assert name in transformer_config_names()


def test_unknown_preset_lists_known_names():
    with pytest.raises(ValueError, match="wan2.1-t2v-1.3b, wan2.1-t2v-14b, tiny"):
        get_transformer_config("wan2.1-t2v-13b")


def test_config_is_frozen_and_validated():
    cfg = get_transformer_config("tiny-planted")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_layers = 3
    with pytest.raises(ValueError, match="qk_norm='rms_norm'"):
        WanTransformerConfig(qk_norm="rms_norm")
    with pytest.raises(ValueError, match="attention_head_dim=33"):
        WanTransformerConfig(attention_head_dim=33)


def test_from_diffusers_json_matches_preset():
    # The transformer/config.json of Wan2.1-T2V-1.3B-Diffusers.
    raw = {
        "_class_name": "WanTransformer3DModel",
        "_diffusers_version": "0.33.0.dev0",
        "added_kv_proj_dim": None,
        "attention_head_dim": 128,
        "cross_attn_norm": True,
        "eps": 1e-06,
        "ffn_dim": 8960,
        "freq_dim": 256,
        "image_dim": None,
        "in_channels": 16,
        "num_attention_heads": 12,
        "num_layers": 30,
        "out_channels": 16,
        "patch_size": [1, 2, 2],
        "qk_norm": "rms_norm_across_heads",
        "rope_max_seq_len": 1024,
        "text_dim": 4096,
    }
    assert WanTransformerConfig.from_diffusers_json(raw) == get_transformer_config(
        "wan2.1-t2v-1.3b"
    )
    with pytest.raises(ValueError, match="image-conditioning.*image_dim"):
        WanTransformerConfig.from_diffusers_json({**raw, "image_dim": 1280})
    with pytest.raises(ValueError, match=r"\['num_layer'\]"):
        WanTransformerConfig.from_diffusers_json({**raw, "num_layer": 3})
    with pytest.raises(ValueError, match="FluxTransformer2DModel"):
        WanTransformerConfig.from_diffusers_json({**raw, "_class_name": "FluxTransformer2DModel"})


def test_config_differences():
    a = get_transformer_config("wan2.1-t2v-1.3b")
    b = get_transformer_config("wan2.1-t2v-14b")
    diffs = config_differences(a, b)
    assert [d[0] for d in diffs] == ["num_attention_heads", "ffn_dim", "num_layers"]
    assert ("num_layers", 30, 40) in diffs
    assert config_differences(a, a) == []
    assert config_differences(a, b, fields=("ffn_dim",)) == [("ffn_dim", 8960, 13824)]


# --- RoPE -----------------------------------------------------------------------------------


def test_rope_axis_split():
    assert rope_axis_dims(128) == (44, 42, 42)
    assert rope_axis_dims(64) == (24, 20, 20)
    assert rope_axis_dims(32) == (12, 10, 10)


def test_rope_tables_against_per_token_loop():
    grid, d = (3, 4, 5), 32
    cos, sin = rope_tables(grid, d)
    dt, dh, dw = rope_axis_dims(d)
    expected = np.zeros((math.prod(grid), d // 2))
    n = 0
    for f in range(grid[0]):
        for i in range(grid[1]):
            for j in range(grid[2]):
                row = []
                for pos, width in ((f, dt), (i, dh), (j, dw)):
                    row += [pos / 10000.0 ** (2 * p / width) for p in range(width // 2)]
                expected[n] = row
                n += 1
    assert cos.dtype == jnp.float32 and cos.shape == (60, 16)
    # The tables are built in float64 and rounded to float32 once: the error is at most half an
    # ulp of a value in [-1, 1] (2^-25, 3e-8). Absolute, since sin(0) = 0 makes rtol meaningless;
    # 2.5e-7 is two ulps at 1.0, room for the host libm's float64 cos and sin.
    assert_allclose(cos, np.cos(expected), atol=2.5e-7)
    assert_allclose(sin, np.sin(expected), atol=2.5e-7)


def test_apply_rope_is_complex_rotation_of_interleaved_pairs():
    grid, d = (2, 3, 2), 32
    cos, sin = rope_tables(grid, d)
    x = jax.random.normal(jax.random.key(1), (2, 12, 3, d))
    out = apply_rope(x, cos, sin)
    xn = np.asarray(x, np.float64)
    z = (xn[..., 0::2] + 1j * xn[..., 1::2]) * (
        np.asarray(cos, np.float64) + 1j * np.asarray(sin, np.float64)
    )[None, :, None, :]
    expected = np.stack([z.real, z.imag], axis=-1).reshape(xn.shape)
    # Each output is x cos - y sin (two float32 products and a sum, |x|, |y| up to ~4): a few
    # ulps relative, rtol 1e-6 (~8 ulps). An output near zero is a cancellation whose rounding
    # error is relative to the inputs, not to the result, hence atol 1e-6 (~2 ulps at |x| = 4).
    assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert apply_rope(x.astype(jnp.bfloat16), cos, sin).dtype == jnp.bfloat16


def test_rope_rejects_grid_beyond_max_seq_len():
    with pytest.raises(ValueError, match="rope_max_seq_len"):
        rope_tables((2, 70, 3), 32, max_seq_len=64)


# --- embeddings and attention ---------------------------------------------------------------


def test_timestep_embedding_cos_first():
    t = jnp.array([0.0, 1.0, 999.0])
    emb = timestep_embedding(t, 8)
    freqs = np.exp(-np.log(10000.0) * np.arange(4) / 4)
    ang = np.asarray(t, np.float64)[:, None] * freqs[None]
    # cos/sin are bounded by 1 and the error is absolute in the float32 angle: t * freq at
    # t = 999 carries up to half an ulp of 999 (3e-5) into cos and sin, so atol 1e-4, no rtol.
    assert_allclose(emb, np.concatenate([np.cos(ang), np.sin(ang)], -1), atol=1e-4)
    # At t = 0 every angle is exactly 0: cos 0 = 1 and sin 0 = 0 are exact in float32.
    assert_allclose(emb[0], np.array([1, 1, 1, 1, 0, 0, 0, 0.0]), atol=0)


def test_dense_attention_matches_reference_formula():
    kq, kk, kv = jax.random.split(jax.random.key(2), 3)
    q = jax.random.normal(kq, (2, 7, 3, 16))
    k = jax.random.normal(kk, (2, 9, 3, 16))
    v = jax.random.normal(kv, (2, 9, 3, 16))
    s = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64)) / 4.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = np.einsum("bhqk,bkhd->bqhd", p, np.asarray(v, np.float64))
    # float32: 16-term scores, a 9-term softmax and a 9-term weighted sum of v, so a few ulps
    # times ~25 accumulated terms: rtol 1e-5. Outputs are convex combinations of v (|v| <= 3.3)
    # and one near zero is a cancellation, whose error scales with |v|: atol 3e-6 (~12 ulps of 3.3).
    assert_allclose(dense_attention(q, k, v, step=0, layer=0), expected, rtol=1e-5, atol=3e-6)
    assert_allclose(jax.nn.dot_product_attention(q, k, v), expected, rtol=1e-5, atol=3e-6)
    out16 = dense_attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16))
    assert out16.dtype == jnp.bfloat16
    # bfloat16 keeps 8 significant bits: rounding q, k, v and the output costs ~2^-8 relative
    # each, so rtol 1e-2; outputs near zero inherit errors of size 2^-8 |v| ~ 1e-2 (atol).
    assert_allclose(out16, expected, rtol=1e-2, atol=1e-2)


# --- the model and its attention contract ---------------------------------------------------


def test_forward_shape_and_dtype(small_model):
    latents, timestep, context = _inputs(SMALL)
    out = small_model(latents, timestep, context)
    assert out.shape == latents.shape and out.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(out)))


def test_attend_receives_contract_shapes_layers_and_step(small_model):
    latents, timestep, context = _inputs(SMALL, grid=(3, 4, 6))
    calls = []

    def attend(q, k, v, *, step, layer):
        calls.append((q.shape, k.shape, v.shape, layer, type(layer)))
        # Scaling by (step + 1) makes the output depend on the step the model hands over.
        return dense_attention(q, k, v) * (step + 1).astype(q.dtype)

    default = small_model(latents, timestep, context)
    at_step0 = small_model(latents, timestep, context, attend=attend, step=0)
    n = 3 * 2 * 3  # F * Hp * Wp
    assert calls == [((2, n, 2, 32),) * 3 + (layer, int) for layer in (0, 1)]
    # Exact: both calls run the same eager ops on the same q, k, v; scaling by 1.0 is exact.
    assert_allclose(at_step0, default, atol=0)

    run = nnx.jit(lambda m, s: m(latents, timestep, context, attend=attend, step=s))
    # jit fuses and reorders float32 sums that eager runs op by op, so the two differ by rounding:
    # a few ulps times the accumulated terms (64-wide projections and FFN, two blocks), about
    # 1e-5 relative. Outputs (RMS ~1, up to ~4) near zero are cancellations whose error is set
    # by that scale, not by the element, hence atol 1e-5 as well. A wrong step scales attention
    # by 2 and moves outputs by ~1 (checked below), far beyond either bound.
    assert_allclose(run(small_model, jnp.int32(0)), default, rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(run(small_model, jnp.int32(1)) - default))) > 1e-3


def test_attend_sees_tokens_frame_major(small_model):
    """A change to one latent patch changes exactly one token of v, at index f*S + i*Wp + j."""
    # The shapes of test_attend_receives_contract_shapes_layers_and_step: its eager ops are reused.
    latents, timestep, context = _inputs(SMALL, grid=(3, 4, 6))
    seen = []

    def capture(q, k, v, *, step, layer):
        if layer == 0:
            seen.append(np.asarray(v))
        return dense_attention(q, k, v)

    small_model(latents, timestep, context, attend=capture)
    f, i, j = 2, 1, 0  # token grid (3, 2, 3)
    bumped = latents.at[:, :, f, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].add(1.0)
    small_model(bumped, timestep, context, attend=capture)
    changed = np.nonzero(np.abs(seen[1] - seen[0]).max(axis=(0, 2, 3)) > 0)[0]
    assert changed.tolist() == [f * 2 * 3 + i * 3 + j]


def test_attend_with_wrong_output_shape_is_refused(small_model):
    latents, timestep, context = _inputs(SMALL)
    with pytest.raises(ValueError, match="attend returned shape"):
        small_model(latents, timestep, context, attend=lambda q, k, v, *, step, layer: q[:, :-1])


def test_batch_rows_are_independent_and_scalar_timestep_broadcasts(small_model):
    latents, timestep, context = _inputs(SMALL)
    both = small_model(latents, timestep, context)
    for b in range(2):
        single = small_model(latents[b : b + 1], timestep[b : b + 1], context[b : b + 1])
        # Batch 1 and batch 2 matmuls may block and sum differently: rounding only, bounded as
        # in test_attend_receives_contract_shapes_layers_and_step (rtol and an atol at the output
        # scale, RMS ~1). Leakage between batch rows would move outputs by O(1).
        assert_allclose(single[0], both[b], rtol=1e-5, atol=1e-5)
    same_t = small_model(latents, jnp.float32(500.0), context)
    # Exact: a scalar timestep is broadcast to [B] before anything is computed from it.
    assert_allclose(same_t, small_model(latents, jnp.full((2,), 500.0), context), atol=0)


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((2, 8, 3, 4, 6), (2,), (2, 5, 24)), "latents shape"),
        (((2, 16, 3, 5, 6), (2,), (2, 5, 24)), "divisible by patch_size"),
        (((2, 16, 3, 4, 6), (3,), (2, 5, 24)), "timestep shape"),
        (((2, 16, 3, 4, 6), (2,), (2, 5, 32)), "context shape"),
    ],
)
def test_bad_input_shapes(small_model, shapes, match):
    lat, t, ctx = (jnp.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        small_model(lat, t, ctx)


def test_bfloat16_model_tracks_float32(small_model):
    latents, timestep, context = _inputs(SMALL)
    graphdef, abstract = nnx.split(
        nnx.eval_shape(
            lambda: WanTransformer(
                SMALL, rngs=nnx.Rngs(0), param_dtype=jnp.bfloat16, dtype=jnp.bfloat16
            )
        )
    )
    f32 = dict(nnx.to_flat_state(nnx.state(small_model)))
    flat = [
        (p, v.replace(f32[p][...].astype(v.get_value().dtype)))
        for p, v in nnx.to_flat_state(abstract)
    ]
    dtypes = {
        p[-2:] if p[-1] != "scale_shift_table" else p[-1:]: v.get_value().dtype for p, v in flat
    }
    assert dtypes[("to_q", "kernel")] == jnp.bfloat16
    assert dtypes[("scale_shift_table",)] == jnp.float32  # float32 island, as in the reference
    assert dtypes[("time_linear_1", "kernel")] == jnp.float32
    bf16 = nnx.merge(graphdef, nnx.from_flat_state(flat))
    out = bf16(latents, timestep, context)
    ref = small_model(latents, timestep, context)
    assert out.dtype == jnp.bfloat16
    rel = float(jnp.linalg.norm(out.astype(jnp.float32) - ref) / jnp.linalg.norm(ref))
    assert rel < 3e-2, rel
