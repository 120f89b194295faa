"""Routing ties go to spatial: real ties, where both masks keep the same keys, so both errors are
the same number and a ``<=`` in place of ``<`` would route every head temporal.

The ties: one frame, or one token per frame, where the temporal layout is the identity (the
temporal mask is the spatial one; with one frame SVG's sink is every key, so that case leaves the
sink out), and a band wide enough that both masks keep every key (both errors are 0). Checked for
the single-device routing and the sequence-sharded one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from kernels.masks.band import BandMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position
from kernels.parallel import SEQ_AXIS, make_mesh, route_rows_sharded
from kernels.policy.routing import Routing, route_heads, route_rows, routing_key

# case -> (geometry, mask, whether the mask drops keys)
TIES = {
    "one frame": (TokenGeometry(1, 6, 8), BandMask(48, half_width=6, sink=0), True),
    "one token per frame": (
        TokenGeometry(16, 1, 1),
        band_for_density(TokenGeometry(16, 1, 1), 0.3),
        True,
    ),
    "every key kept": (
        TokenGeometry(4, 3, 4),
        band_for_density(TokenGeometry(4, 3, 4), 1.0),
        False,
    ),
}


def _qkv(geometry: TokenGeometry, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return [jax.random.normal(key, (2, geometry.tokens, 4, 16)) for key in keys]


def _assert_a_tie_routed_spatial(routing: Routing, case: str) -> None:
    spatial, temporal = np.asarray(routing.spatial_error), np.asarray(routing.temporal_error)
    np.testing.assert_array_equal(temporal, spatial)  # a real tie, bit for bit
    if TIES[case][2]:
        assert (spatial > 0).all()  # the masks drop keys: a tie of two real errors
    else:
        assert (spatial == 0).all()
    assert not np.asarray(routing.temporal).any(), "a tie went to temporal"


@pytest.mark.parametrize("case", sorted(TIES))
def test_the_tie_cases_are_ties(case):
    geometry, mask, drops = TIES[case]
    index = jnp.arange(geometry.tokens, dtype=jnp.int32)
    spatial = mask.allowed(index[:, None], index[None, :])
    position = temporal_position(index, geometry)
    temporal = mask.allowed(position[:, None], position[None, :])
    np.testing.assert_array_equal(spatial, temporal)
    assert bool(np.asarray(spatial).all()) != drops


@pytest.mark.parametrize("mode", ["oracle", "sampled"])
@pytest.mark.parametrize("case", sorted(TIES))
def test_a_tie_goes_to_spatial(case, mode):
    geometry, mask, _ = TIES[case]
    q, k, v = _qkv(geometry)
    routing = jax.jit(
        lambda q, k, v: route_heads(
            q, k, v, mask, geometry, key=routing_key(0, 1, 2), samples=16, mode=mode
        )
    )(q, k, v)
    _assert_a_tie_routed_spatial(routing, case)


@pytest.mark.parametrize("case", sorted(TIES))
def test_a_tie_goes_to_spatial_on_sequence_sharded_inputs(case):
    geometry, mask, _ = TIES[case]
    q, k, v = _qkv(geometry, seed=1)
    rows = jnp.arange(geometry.tokens, dtype=jnp.int32)
    tokens = P(None, SEQ_AXIS, None, None)
    run = jax.shard_map(
        lambda q, k, v: route_rows_sharded(q, k, v, rows, mask, geometry, SEQ_AXIS),
        mesh=make_mesh(1),
        in_specs=(tokens, tokens, tokens),
        out_specs=Routing(P(), P(), P()),
    )
    routing = jax.jit(run)(q, k, v)
    _assert_a_tie_routed_spatial(routing, case)
    # The same flags and errors as the single-device routing.
    single = route_rows(q, k, v, rows, mask, geometry)
    np.testing.assert_array_equal(routing.temporal, single.temporal)
