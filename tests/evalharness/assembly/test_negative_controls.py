"""Negative controls: each broken sparse arm changes exactly what its name says, nothing else.

Small inputs against the masked reference oracle; ``none`` is the correct path, unchanged.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evalharness.assembly.attention_setup import build_attention
from evalharness.config.schemas import NegativeControl
from kernels.executors.reference import reference_attention
from kernels.masks.band import StridedTemporalMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_permutation
from kernels.parallel.attend import SequenceParallelAttend
from kernels.parallel.mesh import make_mesh
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.dense_attend import make_dense_attend
from kernels.policy.negative_controls import (
    NEGATIVE_CONTROLS,
    QUALITY_CONTROLS,
    controlled_flags,
    restores_layout,
    with_discarded,
)
from kernels.policy.routing import route_heads, routing_key
from kernels.policy.schedule import SparsitySchedule
from models.config import get_transformer_config
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config
from tests.helpers.numerics import assert_allclose

GEOMETRY = TokenGeometry(4, 4, 6)  # 96 tokens, 24 per frame
DENSITY = 0.4
SCHEDULE = SparsitySchedule("s", 0.0, 0.0, DENSITY, variant="b2")
ROUTED = jnp.asarray([[True, False, True], [False, False, True]])  # [batch, heads]
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _qkv():
    rng = np.random.default_rng(3)
    shape = (2, GEOMETRY.tokens, 3, 16)
    return tuple(jnp.asarray(rng.standard_normal(shape, np.float32)) for _ in range(3))


def _policy(control: str = "none", **kwargs) -> AttentionPolicy:
    return AttentionPolicy(
        SCHEDULE,
        GEOMETRY,
        num_steps=2,
        num_layers=1,
        backend="xla",
        block_sizes=BlockSizes(16, 16),
        negative_control=control,
        **kwargs,
    )


@pytest.fixture(scope="module")
def oracle():
    """Per-head outputs of the two masks (frame-major), and the temporal one in its own layout."""
    q, k, v = _qkv()
    band = band_for_density(GEOMETRY, DENSITY)
    spatial = reference_attention(q, k, v, band)
    temporal = reference_attention(q, k, v, StridedTemporalMask(GEOMETRY, band.half_width))
    perm = jnp.asarray(temporal_permutation(GEOMETRY))
    return (q, k, v), spatial, temporal, jnp.take(temporal, perm, axis=1)


def _mix(flags, temporal_out, spatial_out):
    return jnp.where(flags[:, None, :, None], temporal_out, spatial_out)


def test_controlled_flags_by_hand():
    routed = jnp.asarray([[True, False], [False, False]])
    expected = {
        "none": routed,
        "no_unpermute": routed,
        "all_spatial": jnp.zeros((2, 2), bool),
        "all_temporal": jnp.ones((2, 2), bool),
        "inverted": jnp.asarray([[False, True], [True, True]]),
        "redundant_dense": routed,
    }
    assert set(expected) == set(NEGATIVE_CONTROLS)
    for control, flags in expected.items():
        out = controlled_flags(control, routed)
        assert out.dtype == jnp.bool_ and bool(jnp.all(out == flags)), control
    assert [restores_layout(c) for c in NEGATIVE_CONTROLS] == [True] * 4 + [False, True]


@pytest.mark.parametrize("control", QUALITY_CONTROLS)
def test_sparse_attention_of_each_control_against_the_oracle(oracle, control):
    (q, k, v), spatial, temporal, temporal_layout = oracle
    policy = _policy(control)
    flags = policy.layout_flags(ROUTED)
    out = jax.jit(policy.sparse_attention)(q, k, v, flags)
    expected_flags = controlled_flags(control, ROUTED)
    # Only no_unpermute leaves temporal heads' rows in the temporal layout.
    temporal_rows = temporal_layout if control == "no_unpermute" else temporal
    assert_allclose(out, _mix(expected_flags, temporal_rows, spatial), **TOL)
    if control != "none":  # every control really changes the output
        correct = _mix(ROUTED, temporal, spatial)
        assert float(jnp.max(jnp.abs(out - correct))) > 1e-2


@pytest.mark.parametrize("control", ["inverted", "no_unpermute"])
def test_sparse_branch_routes_then_applies_the_control_and_records_what_ran(control):
    q, k, v = _qkv()
    policy = _policy(control, record_stats=True)
    step = jnp.int32(1)
    out = policy.sparse_branch(q, k, v, step=step, layer=0)
    routing = route_heads(
        q, k, v, policy.routing_mask, GEOMETRY, key=routing_key(0, step, 0), samples=64
    )
    ran = controlled_flags(control, routing.temporal)
    expected = _policy(control).sparse_attention(q, k, v, ran)
    assert_allclose(out, expected, atol=0)
    stats = policy.stats
    np.testing.assert_array_equal(stats.temporal[1, 0], np.asarray(ran, np.int8))
    np.testing.assert_allclose(stats.spatial_error[1, 0], routing.spatial_error, rtol=1e-6)


def test_none_is_the_unchanged_correct_path():
    q, k, v = _qkv()
    plain = AttentionPolicy(
        SCHEDULE, GEOMETRY, num_steps=2, num_layers=1, block_sizes=BlockSizes(16, 16)
    )
    none = _policy("none")
    assert none.layout_flags(ROUTED) is ROUTED
    step = jnp.int32(1)

    def program(policy):
        return str(jax.make_jaxpr(lambda q, k, v: policy(q, k, v, step=step, layer=0))(q, k, v))

    assert program(none) == program(plain)
    np.testing.assert_array_equal(
        none.sparse_attention(q, k, v, ROUTED), plain.sparse_attention(q, k, v, ROUTED)
    )


def _flops(function, *args) -> float:
    return float(jax.jit(function).lower(*args).compile().cost_analysis()["flops"])


def test_redundant_dense_keeps_the_output_bit_for_bit_and_adds_the_dense_work():
    q, k, v = _qkv()
    # The reference dense executor (no loop: XLA's cost analysis counts a loop's body once).
    dense = make_dense_attend("reference", backend="reference")
    correct = _policy("none", dense_attend=dense)
    slowed = _policy("redundant_dense", dense_attend=dense)
    assert slowed.layout_flags(ROUTED) is ROUTED
    out = jax.jit(slowed.sparse_attention)(q, k, v, ROUTED)
    np.testing.assert_array_equal(out, jax.jit(correct.sparse_attention)(q, k, v, ROUTED))
    # The compiled program still computes the discarded dense attention: at least its two
    # matmuls' flops (2 * 2 * B * H * N^2 * D) on top of the correct arm's.
    b, n, h, d = q.shape
    extra = _flops(slowed.sparse_attention, q, k, v, ROUTED)
    extra -= _flops(correct.sparse_attention, q, k, v, ROUTED)
    assert extra >= 4 * b * h * n * n * d, extra


def test_with_discarded_returns_its_first_argument_exactly():
    out = jnp.asarray([1.5, -0.0, 3e38, -2.0], jnp.float32)
    discarded = jnp.asarray([7.0, -3.0, 3e38, 0.0], jnp.float32)
    np.testing.assert_array_equal(jax.jit(with_discarded)(out, discarded), out)
    bf16 = jax.jit(with_discarded)(out.astype(jnp.bfloat16), discarded)
    assert bf16.dtype == jnp.bfloat16


def test_unknown_control_is_refused():
    with pytest.raises(ValueError, match="negative_control='flipped'.*all_spatial"):
        _policy("flipped")


@pytest.mark.parametrize(
    ("control", "placement"), [("inverted", "head_local"), ("no_unpermute", "before_exchange")]
)
def test_sequence_parallel_path_applies_the_control(control, placement):
    q, k, v = _qkv()
    policy = _policy(control)
    parallel = SequenceParallelAttend(policy, make_mesh(1), placement=placement)
    if control == "no_unpermute":  # before the exchange: the restoring permutation is skipped
        flags = policy.layout_flags(ROUTED)
        out, expected = (attend.sparse_attention(q, k, v, flags) for attend in (parallel, policy))
    else:  # the flags are overridden after the sharded routing
        calls = (
            jax.jit(lambda q, k, v, a=a: a(q, k, v, step=1, layer=0)) for a in (parallel, policy)
        )
        out, expected = (call(q, k, v) for call in calls)
    assert_allclose(out, expected, **TOL)


def test_the_harness_gives_the_control_to_the_sparse_arm_only(tmp_path):
    from evalharness.assembly import platform_choices
    from evalharness.config.schemas import to_config

    cfg = platform_choices.resolve(to_config(small_config(tmp_path)))
    video = VideoGeometry(cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width)
    tcfg = get_transformer_config("tiny-planted")
    assert build_attention(cfg, video, tcfg).sparse.negative_control == "none"
    broken = dataclasses.replace(cfg, negative_control=NegativeControl("all_temporal"))
    setup = build_attention(broken, video, tcfg)
    assert setup.sparse.negative_control == setup.recording.negative_control == "all_temporal"
    assert not isinstance(setup.dense, AttentionPolicy)
