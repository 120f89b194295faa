"""The scanned transformer (blocks as one ``lax.scan`` over stacked weights) against the unrolled
one: same weights, same outputs, same routing, same placement, and the setting that picks it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel
from flax import nnx
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from evalharness.assembly.platform_choices import scan_layers_for
from evalharness.config import ModelConfig
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.schedule import SparsitySchedule
from models.config import get_transformer_config
from models.loading import load_transformer
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.sharding import param_bytes_per_device, param_shardings
from models.tiny_components import tiny_transformer
from models.transformer import WanTransformer, abstract_transformer, stack_blocks
from tests.helpers.numerics import assert_allclose

# 17 frames at 64 x 128 pixels: 5 latent frames of 4 x 8 tokens, 160 tokens.
LATENT_SHAPE = (1, 16, 5, 8, 16)
GEOMETRY = TokenGeometry(5, 4, 8)
STEPS = 2
# floor(0.5 * 2) = 1 dense step and 1 dense layer of the tiny model's 2: layer 0 is dense at
# every step (the traced layer's branch), layer 1 dense at step 0 and routed at step 1.
DENSE_FIRST = SparsitySchedule("probe", 0.5, 0.5, 0.35)
DENSE = SparsitySchedule("dense", 0.0, 0.0, 1.0, sparse=False)


@pytest.fixture(scope="module")
def pair():
    """(config, unrolled, scanned) tiny models from one seed, float32."""
    config = get_transformer_config("tiny-planted")
    unrolled = WanTransformer(config, rngs=nnx.Rngs(0))
    scanned = WanTransformer(config, rngs=nnx.Rngs(0), scan_layers=True)
    return config, unrolled, scanned


@pytest.fixture(scope="module")
def inputs(pair):
    config = pair[0]
    keys = jax.random.split(jax.random.key(1), 3)
    latents = jax.random.normal(keys[0], LATENT_SHAPE)
    context = jax.random.normal(keys[1], (1, config.text_len, config.text_dim))
    negative = jax.random.normal(keys[2], (1, config.text_len, config.text_dim))
    return latents, context, negative


def test_scanned_model_holds_the_unrolled_weights_stacked(pair):
    config, unrolled, scanned = pair
    stacked = nnx.to_flat_state(nnx.state(scanned.blocks))
    assert all(v.get_value().shape[0] == config.num_layers for _, v in stacked)
    for layer, block in enumerate(unrolled.blocks):
        per_layer = dict(nnx.to_flat_state(nnx.state(block)))
        assert set(per_layer) == {path for path, _ in stacked}
        for path, var in stacked:
            np.testing.assert_array_equal(var.get_value()[layer], per_layer[path].get_value())
    outside = [p for p, _ in nnx.to_flat_state(nnx.state(unrolled)) if p[0] != "blocks"]
    assert outside == [p for p, _ in nnx.to_flat_state(nnx.state(scanned)) if p[0] != "blocks"]


def test_scanned_forward_matches_unrolled(pair, inputs):
    _, unrolled, scanned = pair
    latents, context, _ = inputs
    timestep = jnp.asarray([637.0])
    want = unrolled(latents, timestep, context)
    got = scanned(latents, timestep, context)
    scale = float(jnp.max(jnp.abs(want)))
    assert scale > 0.1
    assert_allclose(got, want, atol=1e-6 * scale)
    jaxpr = str(jax.make_jaxpr(lambda x: scanned(x, timestep, context))(latents))
    assert jaxpr.count("scan[") == 1  # one scanned layer, whatever the depth


@pytest.mark.parametrize(
    "schedule",
    # Dense first layers route the rest; the all-dense schedule routes nothing (slow step).
    [pytest.param(DENSE, marks=pytest.mark.slow), DENSE_FIRST],
    ids=["dense", "dense_first_layers"],
)
def test_two_step_loop_matches_unrolled_with_routing(pair, inputs, schedule):
    config, unrolled, scanned = pair
    latents, context, negative = inputs
    runs = []
    for model in (unrolled, scanned):
        policy = AttentionPolicy(
            schedule,
            GEOMETRY,
            num_steps=STEPS,
            num_layers=config.num_layers,
            block_sizes=BlockSizes(8, 8),
            record_stats=schedule.sparse,
            seed=3,
        )
        loop = DenoiseLoop(model, make_sampler("unipc", STEPS, 3.0), attend=policy)
        out = loop(latents, context, negative)
        assert bool(out.finite)
        runs.append((np.asarray(out.latents), policy.stats if schedule.sparse else None))
    (want, want_stats), (got, got_stats) = runs
    assert_allclose(got, want, atol=1e-6 * float(np.max(np.abs(want))))
    if schedule.sparse:
        np.testing.assert_array_equal(got_stats.temporal, want_stats.temporal)
        # Layer 0 is a dense first layer at every step; layer 1 is routed at step 1 only.
        np.testing.assert_array_equal(got_stats.sparse_cells, [[False, False], [False, True]])
        assert_allclose(got_stats.spatial_error, want_stats.spatial_error, rtol=1e-5)


def test_policy_takes_a_traced_layer_as_it_takes_a_python_int():
    policy = AttentionPolicy(
        DENSE_FIRST, GEOMETRY, num_steps=STEPS, num_layers=2, block_sizes=BlockSizes(8, 8), seed=3
    )
    keys = jax.random.split(jax.random.key(11), 3)
    q, k, v = (jax.random.normal(key, (2, GEOMETRY.tokens, 3, 16)) for key in keys)
    traced = jax.jit(lambda q, k, v, s, layer: policy(q, k, v, step=s, layer=layer))
    for step in range(STEPS):
        for layer in range(2):
            want = policy(q, k, v, step=jnp.int32(step), layer=layer)
            got = traced(q, k, v, jnp.int32(step), jnp.int32(layer))
            assert_allclose(got, want, atol=1e-6)
    for bad in (jnp.float32(1.0), jnp.zeros(2, jnp.int32), 2, True):
        with pytest.raises(ValueError, match="layer="):
            policy(q, k, v, step=jnp.int32(1), layer=bad)


def test_loading_stacks_the_block_weights(tmp_path):
    torch.manual_seed(0)
    arch = {
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "text_dim": 24,
        "ffn_dim": 96,
        "num_layers": 3,
        "rope_max_seq_len": 64,
    }
    WanTransformer3DModel(**arch).eval().save_pretrained(tmp_path)
    unrolled = load_transformer(tmp_path)
    scanned = load_transformer(tmp_path, scan_layers=True, param_dtype=jnp.bfloat16)
    assert scanned.scan_layers and len(unrolled.blocks) == 3
    for layer, block in enumerate(unrolled.blocks):
        got = jax.tree.map(lambda x, layer=layer: x[layer], nnx.state(scanned.blocks))
        for a, b in zip(jax.tree.leaves(nnx.state(block)), jax.tree.leaves(got), strict=True):
            np.testing.assert_array_equal(np.asarray(a.astype(b.dtype)), np.asarray(b))
    flat = dict(nnx.to_flat_state(nnx.state(scanned)))
    assert flat[("blocks", "attn1", "to_q", "kernel")].get_value().dtype == jnp.bfloat16
    assert flat[("blocks", "scale_shift_table")].get_value().dtype == jnp.float32


@pytest.mark.parametrize("rule", ["replicated", "fsdp"])
def test_each_layer_is_placed_as_the_unrolled_model_places_it(rule):
    config = get_transformer_config("wan2.1-t2v-14b")
    mesh = AbstractMesh((8,), ("seq",))
    unrolled = abstract_transformer(config, param_dtype=jnp.bfloat16)
    scanned = abstract_transformer(config, param_dtype=jnp.bfloat16, scan_layers=True)
    per_layer = dict(nnx.to_flat_state(param_shardings(unrolled.blocks[0], mesh, rule)))
    stacked = nnx.to_flat_state(param_shardings(scanned, mesh, rule))
    blocks = {path[1:]: s.get_value() for path, s in stacked if path[0] == "blocks"}
    assert set(blocks) == set(per_layer)
    for path, sharding in blocks.items():
        assert sharding.spec == P(None, *per_layer[path].get_value().spec)
    assert param_bytes_per_device(scanned, mesh, rule) == param_bytes_per_device(
        unrolled, mesh, rule
    )
    if rule == "fsdp":
        assert blocks[("ffn", "proj_in", "kernel")].spec == P(None, None, "seq")


def test_scan_layers_setting_per_platform():
    assert [scan_layers_for("auto", p) for p in ("tpu", "gpu", "cpu")] == [True, True, False]
    assert scan_layers_for(False, "tpu") is False and scan_layers_for(True, "cpu") is True
    assert ModelConfig(scan_layers="true").scan_layers is True
    with pytest.raises(ValueError, match=r"model.scan_layers='yes': expected true, false or auto"):
        ModelConfig(scan_layers="yes")


def test_planted_tiny_model_scanned_holds_the_planted_weights():
    unrolled = tiny_transformer("tiny-planted", 0)
    scanned = tiny_transformer("tiny-planted", 0, scan_layers=True)
    assert scanned.scan_layers and not unrolled.scan_layers
    want = stack_blocks(list(unrolled.blocks))
    for a, b in zip(
        jax.tree.leaves(nnx.state(want)), jax.tree.leaves(nnx.state(scanned.blocks)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
