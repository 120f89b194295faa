"""A sparse schedule's denoising loop runs as two loops, its dense steps then its sparse steps,
each with its cells decided when tracing: the same latents as one loop whose every attention call
branches on the step, without that branch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.cells import dense_cell, step_phases
from kernels.policy.schedule import SparsitySchedule
from models.config import get_transformer_config
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.transformer import WanTransformer
from tests.helpers.numerics import assert_allclose

GEOMETRY = TokenGeometry(3, 4, 4)  # latents (1, C, 3, 8, 8) with 1x2x2 patches: 48 tokens
TILES = BlockSizes(8, 8)
STEPS = 4


@pytest.mark.parametrize(
    ("dense_steps", "steps", "phases"),
    [
        (2, 10, [(0, 2, True), (2, 10, False)]),
        (0, 10, [(0, 10, None)]),
        (10, 10, [(0, 10, None)]),
        (12, 10, [(0, 10, None)]),
        (9, 10, [(0, 9, True), (9, 10, False)]),
    ],
)
def test_step_phases_cut_the_loop_where_dense_steps_end(dense_steps, steps, phases):
    assert step_phases(dense_steps, steps) == phases


def _policy(first_times_fp: float = 0.5, first_layers_fp: float = 0.0) -> AttentionPolicy:
    schedule = SparsitySchedule(
        "s", first_times_fp, first_layers_fp, density=0.5, routing_samples=8
    )
    return AttentionPolicy(schedule, GEOMETRY, num_steps=STEPS, num_layers=2, block_sizes=TILES)


def test_a_phase_decides_the_step_when_tracing_and_keeps_the_traced_layer():
    policy = _policy(first_layers_fp=0.5)
    step = jnp.int32(3)  # a sparse step: the phase, not the value, decides below
    assert dense_cell(policy.in_step_phase(True), step, 1) is True
    assert dense_cell(policy.in_step_phase(False), jnp.int32(0), 1) is False
    assert dense_cell(policy.in_step_phase(False), step, 0) is True  # a leading dense layer
    traced = dense_cell(policy.in_step_phase(False), step, jnp.int32(0))  # a scanned layer
    assert isinstance(traced, jax.Array) and bool(traced)
    assert isinstance(dense_cell(policy, step, 1), jax.Array)  # no phase: the step decides
    assert [(a, b) for a, b, _ in policy.step_phases(STEPS)] == [(0, 2), (2, 4)]


@pytest.mark.slow  # three loops of the tiny transformer compiled: a minute on a shared CPU
def test_the_phased_loop_equals_one_branching_loop_and_has_no_branch(monkeypatch):
    import models.pipeline as pipeline

    config = get_transformer_config("tiny-planted")
    model = WanTransformer(config, rngs=nnx.Rngs(0), param_dtype=jnp.float32, dtype=jnp.float32)
    keys = jax.random.split(jax.random.key(0), 2)
    latents = jax.random.normal(keys[0], (1, config.in_channels, 3, 8, 8))
    context = jax.random.normal(keys[1], (1, 8, config.text_dim))
    sampler = make_sampler("unipc", STEPS, 5.0)
    phased = DenoiseLoop(model, sampler, attend=_policy()).compile(latents, context)
    monkeypatch.setattr(pipeline, "step_phases_of", lambda attend, steps: [(0, steps, attend)])
    branching = DenoiseLoop(model, sampler, attend=_policy()).compile(latents, context)
    assert "conditional(" in branching.compiled.as_text()
    assert "conditional(" not in phased.compiled.as_text()
    out, ref = phased(latents, context).latents, branching(latents, context).latents
    assert_allclose(out, ref, atol=1e-5 * float(jnp.max(jnp.abs(ref))), rtol=1e-5)
    dense = DenoiseLoop(model, sampler, attend=_policy(first_times_fp=1.0 - 1e-9))
    assert not jnp.allclose(out, dense(latents, context).latents, atol=1e-4)
