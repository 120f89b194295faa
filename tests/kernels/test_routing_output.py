"""A recording sparse loop returns its routing as an output (no host callback in the program),
and the statistics equal those the callback path records."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing_stats import DENSE_FLAG, RoutingOutput
from kernels.policy.schedule import SparsitySchedule
from models.config import get_transformer_config
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.transformer import WanTransformer

GEOMETRY = TokenGeometry(3, 4, 4)  # latents (1, C, 3, 8, 8) with 1x2x2 patches: 48 tokens
STEPS = 4
HOST_CALLBACK = re.compile(r'custom_call_target="[^"]*callback')  # a host callback in the HLO


def test_routing_output_writes_each_cell_at_its_step_and_layer():
    output = RoutingOutput(num_steps=3, num_layers=2, batch=2, heads=3)
    arrays = output.initial()
    flags = jnp.asarray([[True, False, True], [False, False, True]])
    errors = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    temporal, spatial, temporal_error = output.write(
        arrays, [(1, flags, errors, errors + 10)], jnp.int32(2)
    )
    assert temporal.dtype == jnp.int8 and temporal.shape == (3, 2, 2, 3)
    np.testing.assert_array_equal(temporal[2, 1], flags.astype(np.int8))
    np.testing.assert_array_equal(spatial[2, 1], errors)
    np.testing.assert_array_equal(temporal_error[2, 1], errors + 10)
    untouched = np.ones((3, 2), bool)
    untouched[2, 1] = False
    assert np.all(np.asarray(temporal)[untouched] == DENSE_FLAG)
    assert np.all(np.isnan(np.asarray(spatial)[untouched]))
    with pytest.raises(ValueError, match=r"expected \(2, 3\)"):
        output.write(arrays, [(0, flags[:, :2], errors[:, :2], errors[:, :2])], jnp.int32(0))


def _policy() -> AttentionPolicy:
    schedule = SparsitySchedule("s", 0.25, 0.0, density=0.5, routing_samples=8)
    return AttentionPolicy(
        schedule,
        GEOMETRY,
        num_steps=STEPS,
        num_layers=2,
        block_sizes=BlockSizes(8, 8),
        record_stats=True,
    )


@pytest.mark.slow  # two recording loops of the tiny transformer compiled: a minute on a shared CPU
def test_the_loop_returns_the_routing_the_callback_path_records(monkeypatch):
    import models.pipeline as pipeline

    config = get_transformer_config("tiny-planted")
    model = WanTransformer(config, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.float32)
    keys = jax.random.split(jax.random.key(0), 3)
    latents = jax.random.normal(keys[0], (1, config.in_channels, 3, 8, 8))
    context, negative = (jax.random.normal(k, (1, 8, config.text_dim)) for k in keys[1:])
    sampler = make_sampler("unipc", STEPS, 5.0)
    returned, called_back = _policy(), _policy()
    loop = DenoiseLoop(model, sampler, guidance_scale=5.0, attend=returned)
    compiled = loop.compile(latents, context, negative)
    assert not HOST_CALLBACK.search(compiled.compiled.as_text())
    timed = compiled(latents, context, negative)  # a run that does not record
    assert returned.stats.temporal.shape[2] == 0
    out = compiled(latents, context, negative, record=True)
    monkeypatch.setattr(pipeline, "collects_routing", lambda *args: False)
    other = DenoiseLoop(model, sampler, guidance_scale=5.0, attend=called_back)
    reference = other.compile(latents, context, negative)
    assert HOST_CALLBACK.search(reference.compiled.as_text())
    ref_out = reference(latents, context, negative, record=True)
    np.testing.assert_array_equal(out.latents, ref_out.latents)
    np.testing.assert_array_equal(timed.latents, out.latents)
    got, want = returned.stats, called_back.stats
    assert got.temporal.shape == (STEPS, 2, 2, config.num_attention_heads)
    np.testing.assert_array_equal(got.temporal, want.temporal)
    np.testing.assert_allclose(got.spatial_error, want.spatial_error, rtol=1e-6)
    np.testing.assert_allclose(got.temporal_error, want.temporal_error, rtol=1e-6)
    assert np.all(got.temporal[0] == DENSE_FLAG) and np.all(got.temporal[1:] != DENSE_FLAG)
