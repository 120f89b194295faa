"""SVG head routing: planted spatial/temporal heads, sampled vs oracle, errors, FLOPs, bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.reference import reference_attention
from kernels.masks.band import StridedTemporalMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position, to_frame_major
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import (
    route_heads,
    route_rows,
    routing_flops,
    routing_flops_fraction,
    routing_key,
    rows_keep,
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


def test_sample_rows_stay_in_range_when_samples_times_tokens_exceeds_int32():
    # route_heads accepts any samples <= tokens; at 720p that reaches 2**31 from 28,407 rows
    # (at 1440p from 7,102). Shapes only stay small: the rows are all that is computed.
    tokens = preset_tokens("720p").tokens
    rows = np.asarray(sample_rows(routing_key(0, 0, 0), tokens, 30_000))
    assert rows.min() >= 0 and rows.max() < tokens
    assert np.all(np.diff(rows) > 0)


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


# --- routing at realistic sample-to-token ratios ------------------------------------------------
# At 720p the schedules route from routing_samples = 64 rows of 75,600 tokens (0.085%). The tests
# above sample 22% of a 288-token sequence, with heads so clear-cut that any one row routes them.
# These keep 720p's 21 latent frames on a smaller grid (8,064 tokens) and route from 1 to 64 rows
# (0.01% to 0.8%) heads whose preference is strong, weak or absent.

WIDE = TokenGeometry(21, 16, 24)  # 8,064 tokens, 384 per frame
WIDE_SCHEDULE = "aggressive"  # density 0.25; its routing_samples (64) is 0.79% of WIDE's tokens
# Temporal share of each planted head (see ``mixed_qkv``): 0 purely spatial, 1 purely temporal.
WIDE_SHARES = np.array([0.0, 1.0, 0.0, 1.0, 0.45, 0.55, 0.5, 0.5])
STRONG, WEAK, AMBIGUOUS = [0, 1, 2, 3], [4, 5], [6, 7]
WIDE_TRUTH = WIDE_SHARES > 0.5  # the planted preference (meaningless for the ambiguous heads)


def mixed_qkv(geometry: TokenGeometry, temporal_share, density: float, *, head_dim: int = 32):
    """q, k, v (batch 1) whose heads mix a spatial and a temporal preference in set proportions.

    Half of a head's channels hold Fourier features of the frame-major index, half of the
    temporal-layout position, at the same fixed frequencies (spread evenly up to 3 / band
    half-width), weighted sqrt(1 - s) and sqrt(s) for the head's temporal share s. So q_i . k_j is
    amplitude^2 ((1 - s) K(spatial distance) + s K(temporal distance)) for one decaying kernel K,
    plus the noise of ``planted_qkv``: s = 0 or 1 plants a strong head, s = 0.5 a head with no
    preference, and s near 0.5 a weak one, whose preference single rows often contradict.

    Returns:
        (q, k, v [1, tokens, heads, head_dim] float32).
    """
    rng = np.random.default_rng(0)
    n = geometry.tokens
    index = np.arange(n)
    width = band_for_density(geometry, density).half_width
    m = head_dim // 4
    omega = (np.arange(m) + 0.5) / m * 3.0 / width
    spatial, temporal = (
        np.concatenate([np.cos(c[:, None] * omega), np.sin(c[:, None] * omega)], -1) / np.sqrt(m)
        for c in (index * 1.0, temporal_position(index, geometry) * 1.0)
    )
    share = np.asarray(temporal_share, np.float64)[None, :, None]
    features = np.concatenate(
        [np.sqrt(1 - share) * spatial[:, None], np.sqrt(share) * temporal[:, None]], -1
    )
    amplitude, noise = 6.0, 0.5
    q, k = (
        amplitude * (features + noise * rng.normal(size=features.shape) / np.sqrt(head_dim))
        for _ in range(2)
    )
    v = rng.normal(size=features.shape)
    return tuple(jnp.asarray(x[None], jnp.float32) for x in (q, k, v))


@functools.partial(jax.jit, static_argnames=("mask", "samples"))
def _route_wide(q, k, v, key, *, mask, samples):
    # A Python loop over keys, not vmap: compiling is most of these tests' time, and the vmapped
    # routing compiles ~1.5x slower than the plain one.
    return route_heads(q, k, v, mask, WIDE, key=key, samples=samples)


@pytest.fixture(scope="module")
def route_wide():
    """route(samples, draws) -> (temporal, margin), each [draws, heads], for ``WIDE_SHARES``.

    Each draw is the routing key of another step. margin is (spatial_error - temporal_error) /
    (spatial_error + temporal_error), the confidence the errors report: -1 surely spatial, +1
    surely temporal, near 0 a close call. Results are cached; each ``samples`` compiles once.
    """
    schedule = load_schedule(WIDE_SCHEDULE)
    mask = band_for_density(WIDE, schedule.density)
    q, k, v = mixed_qkv(WIDE, WIDE_SHARES, schedule.density)
    cache = {}

    def route(samples: int, draws: int):
        if (samples, draws) not in cache:
            runs = [
                _route_wide(q, k, v, routing_key(0, step, 7), mask=mask, samples=samples)
                for step in range(draws)
            ]
            temporal, s, t = (np.stack([np.asarray(r[i][0]) for r in runs]) for i in range(3))
            s, t = s.astype(np.float64), t.astype(np.float64)
            cache[samples, draws] = (temporal, (s - t) / (s + t))
        return cache[samples, draws]

    return route


# Rows and draws per routing: 8 rows is 0.099% of WIDE's tokens, 64 (the schedules') 0.79%. Each
# rows value compiles once (~1 s), so each test below needs at most one new compile.
DRAWS = {1: 32, 8: 16, 64: 2}


@pytest.mark.parametrize("rows", [8, 64])
def test_strong_heads_are_routed_from_a_realistic_fraction_of_rows(route_wide, rows):
    hd720 = preset_tokens("720p").tokens
    assert load_schedule(WIDE_SCHEDULE).routing_samples == 64
    assert 64 / hd720 <= rows / WIDE.tokens <= 0.01  # from 720p's ratio (0.085%) to 1%
    temporal, margin = route_wide(rows, DRAWS[rows])
    # Half the strong heads are temporal, so a router that always answers spatial fails here;
    # and the errors it reports must be decisive, not a close call that happened to land.
    truth = np.broadcast_to(WIDE_TRUTH[STRONG], temporal[:, STRONG].shape)
    np.testing.assert_array_equal(temporal[:, STRONG], truth)
    assert np.all(np.abs(margin[:, STRONG]) > 0.9), margin


def test_weak_heads_are_found_from_the_schedules_rows(route_wide):
    temporal, margin = route_wide(64, DRAWS[64])
    # 64 rows (0.79% of the tokens) find the weak preferences, with the right sign of confidence.
    np.testing.assert_array_equal(temporal[:, WEAK], np.tile(WIDE_TRUTH[WEAK], (2, 1)))
    assert np.all(np.sign(margin[:, WEAK]) == np.where(WIDE_TRUTH[WEAK], 1, -1)), margin


def test_weak_heads_lose_accuracy_from_one_row(route_wide):
    temporal, _ = route_wide(1, DRAWS[1])
    correct = temporal == WIDE_TRUTH
    # From any single row a strong head is still routed right (what the 288-token tests see)...
    assert correct[:, STRONG].all()
    # ... but a weak one only most of the time, where 64 rows get it right every time. A router
    # that ignored its sample (always every row, or fixed rows) would be right or wrong every time.
    accuracy = correct[:, WEAK].mean(axis=0)
    assert np.all((0.6 <= accuracy) & (accuracy <= 0.95)), accuracy


def test_ambiguous_heads_are_not_routed_with_certainty(route_wide):
    temporal, margin = route_wide(8, DRAWS[8])  # 0.099% of the tokens
    calls = temporal.mean(axis=0)
    agreement = np.maximum(calls, 1 - calls)  # share of draws that make the majority call
    # Strong heads get the same, right, call at every draw; heads with no preference flip with
    # the sampled rows instead of being pinned to one mask.
    np.testing.assert_array_equal(temporal[:, STRONG], np.tile(WIDE_TRUTH[STRONG], (16, 1)))
    assert np.all(agreement[AMBIGUOUS] <= 14 / 16), agreement  # at least 2 of 16 draws differ
    # The errors report them as close calls (typical |margin| ~0.2 from 8 rows), weak heads as
    # leaning (~0.4), strong ones as clear (~1).
    confidence = np.median(np.abs(margin), axis=0)
    assert np.all(confidence[STRONG] > 0.9), confidence
    assert np.all(confidence[AMBIGUOUS] < 0.3), confidence
    assert np.all(confidence[AMBIGUOUS] < confidence[WEAK]), confidence


@pytest.mark.parametrize("preset", ["cpu", "480p"])
def test_row_masks_equal_the_pairwise_predicate(preset):
    # routing builds each sampled row's keep flags from the tile table (b3) and the temporal
    # ones by the layout's transpose; both equal the mask's pairwise predicate exactly.

    geometry = preset_tokens(preset)
    n = geometry.tokens
    band = band_for_density(geometry, 0.3)
    tiles = BlockSizes(128, 128) if preset == "cpu" else BlockSizes(3328, 1536)
    rows = jnp.asarray(np.linspace(0, n - 1, 17).astype(np.int32))
    keys = jnp.arange(n, dtype=jnp.int32)
    for mask in (band, build_plan(band, tiles, "b3", None).logical_mask):
        np.testing.assert_array_equal(
            rows_keep(mask, rows, n), mask.allowed(rows[:, None], keys[None, :])
        )
        trows = temporal_position(rows, geometry)
        np.testing.assert_array_equal(
            to_frame_major(rows_keep(mask, trows, n), geometry),
            mask.allowed(trows[:, None], temporal_position(keys, geometry)[None, :]),
        )
