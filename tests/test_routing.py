"""SVG head routing: planted spatial/temporal heads, sampled vs oracle, errors, FLOPs, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.reference import reference_attention
from kernels.masks.band import StridedTemporalMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import (
    route_heads,
    route_rows,
    routing_flops,
    routing_flops_fraction,
    routing_key,
    sample_rows,
)
from kernels.policy.schedule import SparsitySchedule
from tests.helpers.geometry import preset_tokens
from tests.helpers.numerics import assert_allclose
from tests.helpers.schedules import load_schedule

GEOMETRY = TokenGeometry(6, 6, 8)  # 288 tokens, 48 per frame
DENSITY = 0.3


def planted_qkv(geometry: TokenGeometry, batch: int, heads: int, head_dim: int, seed: int):
    """q, k, v whose (batch, head) pairs attend spatially or temporally, with noise.

    Each head gets random Fourier features of one coordinate per token, so q_i . k_j decays with
    the distance between the tokens' coordinates: for spatial heads the frame-major index (keys
    near the query in its own frame dominate), for temporal heads the temporal-layout position
    (the same spatial position in nearby frames dominates). Independent noise of half the signal's
    size is added to q and k.

    Returns:
        (q, k, v [batch, tokens, heads, head_dim] float32, planted bool [batch, heads]).
    """
    rng = np.random.default_rng(seed)
    n = geometry.tokens
    index = np.arange(n)
    coordinates = {False: index.astype(float), True: temporal_position(index, geometry) * 1.0}
    width = band_for_density(geometry, DENSITY).half_width
    planted = np.zeros((batch, heads), dtype=bool)
    planted[:, : heads // 2] = True
    planted = rng.permuted(planted, axis=1)
    q = np.zeros((batch, n, heads, head_dim))
    k = np.zeros_like(q)
    amplitude, noise = 6.0, 0.5
    for b in range(batch):
        for h in range(heads):
            omega = rng.uniform(0.0, 3.0 / width, head_dim // 2)
            angle = coordinates[bool(planted[b, h])][:, None] * omega[None, :]
            features = np.concatenate([np.cos(angle), np.sin(angle)], -1) / np.sqrt(omega.size)
            for x in (q, k):
                jitter = rng.normal(size=(n, head_dim)) / np.sqrt(head_dim)
                x[b, :, h] = amplitude * (features + noise * jitter)
    v = rng.normal(size=(batch, n, heads, head_dim))
    return (*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), planted)


@pytest.fixture(scope="module")
def planted():
    return planted_qkv(GEOMETRY, batch=2, heads=16, head_dim=64, seed=0)


def test_sample_rows_are_stratified_distinct_and_seeded():
    rows = np.asarray(sample_rows(routing_key(0, 3, 1), 100, 7))
    assert rows.shape == (7,) and rows.dtype == np.int32
    assert np.all(np.diff(rows) > 0) and rows.min() >= 0 and rows.max() < 100
    slices = (np.arange(7) * 100) // 7
    assert np.all(rows >= slices) and np.all(rows < np.append(slices[1:], 100))
    again = np.asarray(sample_rows(routing_key(0, 3, 1), 100, 7))
    np.testing.assert_array_equal(rows, again)
    np.testing.assert_array_equal(np.asarray(sample_rows(routing_key(0, 0, 0), 5, 5)), np.arange(5))
    other = [np.asarray(sample_rows(routing_key(0, s, 1), 100, 7)) for s in range(4)]
    assert len({r.tobytes() for r in other}) > 1


def test_routing_key_with_a_traced_step_matches_the_python_step():
    traced = jax.jit(lambda s: jax.random.key_data(routing_key(5, s, 2)))(jnp.int32(7))
    np.testing.assert_array_equal(traced, jax.random.key_data(routing_key(5, 7, 2)))


def test_route_rows_errors_match_the_dense_oracle():
    geometry = TokenGeometry(4, 3, 4)
    mask = band_for_density(geometry, 0.4)
    keys = jax.random.split(jax.random.key(3), 3)
    q, k, v = (jax.random.normal(key, (2, geometry.tokens, 3, 16)) for key in keys)
    rows = jnp.asarray([0, 5, 13, 30, 47], jnp.int32)
    routing = jax.jit(lambda q, k, v: route_rows(q, k, v, rows, mask, geometry))(q, k, v)
    strided = StridedTemporalMask(geometry, mask.half_width)
    dense, spatial, temporal = jax.jit(
        lambda q, k, v: [reference_attention(q, k, v, m)[:, rows] for m in (None, mask, strided)]
    )(q, k, v)
    expected_s = jnp.mean((spatial - dense) ** 2, axis=(1, 3))
    expected_t = jnp.mean((temporal - dense) ** 2, axis=(1, 3))
    assert_allclose(routing.spatial_error, expected_s, rtol=1e-5, atol=1e-9)
    assert_allclose(routing.temporal_error, expected_t, rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(routing.temporal, expected_t < expected_s)


def test_planted_heads_are_routed_to_their_type(planted):
    q, k, v, truth = planted
    mask = band_for_density(GEOMETRY, DENSITY)
    sampled, oracle = jax.jit(
        lambda q, k, v: [
            route_heads(q, k, v, mask, GEOMETRY, key=routing_key(0, 4, 7), samples=64),
            route_heads(q, k, v, mask, GEOMETRY, mode="oracle"),
        ]
    )(q, k, v)
    assert np.mean(np.asarray(sampled.temporal) == truth) >= 0.95
    assert np.mean(np.asarray(oracle.temporal) == truth) >= 0.95
    assert np.mean(np.asarray(sampled.temporal) == np.asarray(oracle.temporal)) >= 0.90


def test_routed_output_is_closer_to_dense_than_either_single_mask(planted):
    q, k, v, _ = planted
    schedule = SparsitySchedule("s", 0.0, 0.0, DENSITY, variant="b2")
    # The reference backend: this test is about routing; test_policy checks the XLA layouts.
    policy = AttentionPolicy(
        schedule,
        GEOMETRY,
        num_steps=1,
        num_layers=1,
        backend="reference",
        block_sizes=BlockSizes(32, 32),
    )
    routing = jax.jit(
        lambda q, k, v: route_heads(
            q, k, v, policy.routing_mask, GEOMETRY, key=routing_key(0, 0, 0)
        )
    )(q, k, v)
    routed = jax.jit(policy.sparse_attention)(q, k, v, routing.temporal)
    strided = StridedTemporalMask(GEOMETRY, policy.routing_mask.half_width)
    dense, all_spatial, all_temporal = jax.jit(
        lambda q, k, v: [
            reference_attention(q, k, v, m) for m in (None, policy.routing_mask, strided)
        ]
    )(q, k, v)

    def error(x):
        return float(jnp.mean((x - dense) ** 2))

    assert error(routed) < 0.5 * min(error(all_spatial), error(all_temporal))


def test_routing_flops_match_xla_and_stay_under_two_percent_at_720p():
    geometry = TokenGeometry(6, 6, 8)
    mask = band_for_density(geometry, DENSITY)
    batch, heads, head_dim, samples = 2, 4, 64, 32
    x = jax.ShapeDtypeStruct((batch, geometry.tokens, heads, head_dim), jnp.float32)
    rows = jax.ShapeDtypeStruct((samples,), jnp.int32)
    lowered = jax.jit(lambda q, k, v, r: route_rows(q, k, v, r, mask, geometry)).lower(
        x, x, x, rows
    )
    cost = lowered.compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    matmuls = routing_flops(geometry.tokens, head_dim, samples) * batch * heads
    assert matmuls <= cost["flops"] <= 1.15 * matmuls  # the rest is softmax and masking
    hd720 = preset_tokens("720p")
    for name in ("conservative", "balanced", "aggressive"):
        schedule = load_schedule(name)
        fraction = routing_flops_fraction(hd720, schedule.density, schedule.routing_samples)
        assert fraction == pytest.approx(2 * 64 / (75_600 * schedule.density))
        assert fraction < 0.02


def test_bad_input_is_rejected_clearly():
    geometry = TokenGeometry(2, 2, 2)
    mask = band_for_density(geometry, 0.8)
    q = jnp.zeros((1, 8, 2, 8))
    with pytest.raises(ValueError, match="mode='nearest'"):
        route_heads(q, q, q, mask, geometry, mode="nearest")
    with pytest.raises(ValueError, match="samples=9"):
        route_heads(q, q, q, mask, geometry, key=routing_key(0, 0, 0), samples=9)
    with pytest.raises(ValueError, match="samples=0"):
        route_heads(q, q, q, mask, geometry, key=routing_key(0, 0, 0), samples=0)
    with pytest.raises(ValueError, match="PRNG key"):
        route_heads(q, q, q, mask, geometry)
    with pytest.raises(ValueError, match="q has 8 tokens"):
        route_heads(q, q, q, mask, TokenGeometry(3, 2, 2), mode="oracle")
    with pytest.raises(ValueError, match="density"):
        routing_flops_fraction(geometry, 0.0)
    big = TokenGeometry(5, 64, 64)  # 20,480 tokens: shapes only, nothing is computed
    x = jax.ShapeDtypeStruct((1, big.tokens, 1, 8), jnp.float32)
    with pytest.raises(ValueError, match="mode='oracle' at 20480 tokens"):
        jax.eval_shape(lambda q: route_heads(q, q, q, mask, big, mode="oracle"), x)
