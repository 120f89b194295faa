"""Static-mask schedules (``sta``, ``radial``): schedule fields, density knob, and the policy
against the dense masked oracle."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.reference import reference_attention
from kernels.masks.geometry import TokenGeometry
from kernels.masks.radial import RadialMask
from kernels.masks.sta import StaMask, TileOrder
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.schedule import SparsitySchedule
from kernels.policy.static_methods import radial_decay_for_density, sta_window_for_density
from kernels.policy.static_policy import StaticMaskPolicy, make_policy
from tests.helpers.schedules import load_schedule

GEOMETRY = TokenGeometry(5, 6, 8)
TILES = BlockSizes(16, 16)


def _schedule(method: str, **knobs) -> SparsitySchedule:
    return SparsitySchedule("static", 0.0, 0.0, method=method, **knobs)


def _qkv():
    return jax.random.normal(jax.random.PRNGKey(0), (3, 2, GEOMETRY.tokens, 2, 8))


def _oracle(schedule, policy, q, k, v):
    """The plan's logical mask on tokens moved into the schedule's layout by its brute-force
    permutation, moved back."""
    mask = policy.plan.logical_mask
    order = schedule.layout(GEOMETRY)
    if order is None:
        return reference_attention(q, k, v, mask)
    perm = np.asarray(order.permutation)
    inverse = np.argsort(perm)
    out = reference_attention(*(x[:, perm] for x in (q, k, v)), mask)
    return out[:, inverse]


@pytest.mark.parametrize("variant", ["b1", "b2", "b3"])
@pytest.mark.parametrize(
    "schedule",
    [
        _schedule("sta", sta_window=(1, 3, 1), sta_tile=(2, 2, 3)),
        _schedule("sta", density=0.3, sta_tile=(2, 2, 2)),
        _schedule("radial", radial_decay_factor=0.2),
    ],
    ids=["sta", "sta-density", "radial"],
)
def test_static_policy_matches_oracle(schedule, variant):
    schedule = dataclasses.replace(schedule, variant=variant)
    policy = make_policy(schedule, GEOMETRY, num_steps=2, num_layers=2, block_sizes=TILES)
    assert isinstance(policy, StaticMaskPolicy)
    q, k, v = _qkv()
    out = policy(q, k, v, step=jnp.int32(1), layer=1)
    scale = float(jnp.max(jnp.abs(v)))
    np.testing.assert_allclose(out, _oracle(schedule, policy, q, k, v), atol=1e-5 * scale)
    assert 0.0 < policy.plan.density < 1.0


def test_dense_cells_are_the_dense_executor():
    schedule = SparsitySchedule(
        "s", 0.5, 0.0, method="sta", sta_window=(1, 1, 1), sta_tile=(2, 2, 2)
    )
    policy = make_policy(schedule, GEOMETRY, num_steps=2, num_layers=2, block_sizes=TILES)
    q, k, v = _qkv()
    dense = policy(q, k, v, step=jnp.int32(0), layer=1)
    np.testing.assert_allclose(dense, reference_attention(q, k, v), atol=1e-5)
    assert not np.allclose(policy(q, k, v, step=jnp.int32(1), layer=1), dense, atol=1e-3)


def test_no_unpermute_leaves_sta_in_tile_order():
    schedule = _schedule("sta", sta_window=(1, 3, 1), sta_tile=(2, 2, 3))
    kw = dict(num_steps=2, num_layers=2, block_sizes=TILES)
    right = make_policy(schedule, GEOMETRY, **kw)
    wrong = make_policy(schedule, GEOMETRY, negative_control="no_unpermute", **kw)
    q, k, v = _qkv()
    good = right.sparse_attention(q, k, v)
    bad = wrong.sparse_attention(q, k, v)
    np.testing.assert_array_equal(bad[:, right.layout.inverse], good)
    assert not np.allclose(bad, good)


@pytest.mark.parametrize(
    ("schedule", "kwargs", "words"),
    [
        (_schedule("radial", radial_decay_factor=0.2), {"record_stats": True}, "no routing"),
        (
            _schedule("radial", radial_decay_factor=0.2),
            {"negative_control": "no_unpermute"},
            "none",
        ),
        (_schedule("sta", sta_window=(1, 1, 1)), {"negative_control": "inverted"}, "no_unpermute"),
        (_schedule("svg", density=0.4), {}, "routes heads"),
    ],
)
def test_static_policy_refuses(schedule, kwargs, words):
    with pytest.raises(ValueError, match=words):
        StaticMaskPolicy(schedule, GEOMETRY, num_steps=2, num_layers=2, block_sizes=TILES, **kwargs)


def test_make_policy_keeps_svg_on_the_routed_policy():
    schedule = _schedule("svg", density=0.4)
    policy = make_policy(schedule, GEOMETRY, num_steps=2, num_layers=2, block_sizes=TILES)
    assert type(policy) is AttentionPolicy


@pytest.mark.parametrize(
    ("knobs", "words"),
    [
        ({"method": "natten"}, "method='natten'"),
        ({"method": "sta", "sta_window": [3, 3]}, "sta_window"),
        ({"method": "sta", "sta_tile": [6, 0, 8]}, "sta_tile"),
        ({"method": "radial", "radial_decay_factor": 0.0}, "radial_decay_factor"),
    ],
)
def test_schedule_refuses_bad_method_knobs(knobs, words):
    with pytest.raises(ValueError, match=words):
        SparsitySchedule("bad", 0.0, 0.0, **knobs)


def test_shipped_files_carry_the_papers_parameters():
    sta, radial = load_schedule("sta"), load_schedule("radial")
    assert (sta.method, sta.sta_tile, sta.sta_window) == ("sta", (6, 8, 8), (3, 3, 3))
    assert (radial.method, radial.radial_decay_factor) == ("radial", 0.2)
    for schedule in (sta, radial):  # 12 dense steps of 50; Radial: 1 dense block of 30 or 40
        assert schedule.dense_steps(50) == 12
    assert radial.dense_layers(30) == radial.dense_layers(40) == 1 and sta.dense_layers(40) == 0
    assert hash(sta) == hash(load_schedule("sta"))


def test_sta_window_for_density_is_the_closest():
    geometry, tile = TokenGeometry(9, 24, 40), (3, 8, 8)
    order = TileOrder(geometry, tile)
    for target in (0.1, 0.3, 0.41, 0.7):
        chosen = StaMask(order, sta_window_for_density(geometry, tile, target)).density
        every = [
            StaMask(order, w).density
            for w in itertools.product(*(range(1, n + 1) for n in order.grid))
        ]
        assert abs(chosen - target) == min(abs(d - target) for d in every)


def test_radial_decay_for_density_is_the_closest():
    geometry = TokenGeometry(21, 30, 52)
    grid = np.geomspace(0.01, 100.0, 400)
    for target in (0.2, 0.3, 0.45):
        chosen = RadialMask(geometry, radial_decay_for_density(geometry, target)).density
        best = min(abs(RadialMask(geometry, d).density - target) for d in grid)
        assert abs(chosen - target) <= best + 1e-12
