"""Routing on layout-neutral synthetic heads: no frame-0 bias, decisions monotone in the share."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.masks.geometry import TokenGeometry
from kernels.policy.synthetic_heads import SPECTRUM, mixed_head, routing_spectrum

GEOMETRIES = [
    # Wan's 21 latent frames at 81 video frames: about 8 s on 2 cores.
    pytest.param(TokenGeometry(21, 6, 10), marks=pytest.mark.slow),
    pytest.param(TokenGeometry(9, 12, 20), marks=pytest.mark.slow),  # the CPU preset
]


@pytest.mark.parametrize("share", [0.0, 0.3, 0.7, 1.0])
def test_synthetic_head_puts_its_share_on_other_frames(share):
    geometry = TokenGeometry(5, 3, 4)
    q, k, _ = mixed_head(geometry, (share,))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)[0, 0] / np.sqrt(q.shape[-1])
    probs = np.asarray(jax.nn.softmax(scores, axis=-1), np.float64)
    s, n = geometry.tokens_per_frame, geometry.tokens
    idx = np.arange(n)
    same_position = (idx[:, None] % s == idx[None, :] % s) & (idx[:, None] != idx[None, :])
    same_frame = (idx[:, None] // s == idx[None, :] // s) & (idx[:, None] != idx[None, :])
    temporal, spatial = (probs * same_position).sum(1), (probs * same_frame).sum(1)
    np.testing.assert_allclose(temporal / (temporal + spatial), share, atol=0.01)
    # The structure (other frames, own frame, the query itself) holds all but ~1 / strength.
    assert (temporal + spatial + np.diag(probs)).min() > 0.95


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_routing_follows_the_share_without_a_frame0_bias(geometry):
    rows = routing_spectrum(geometry, 0.35, SPECTRUM)
    routed = [row["routed"] for row in rows]
    first = routed.index("temporal")  # once temporal, temporal for every larger share
    assert routed == ["spatial"] * first + ["temporal"] * (len(routed) - first)
    assert routed[0] == "spatial" and routed[-1] == "temporal"
    pure_spatial, pure_temporal = rows[0], rows[-1]
    # Each pure head's own mask beats the other on every row and on frame 0's rows alone.
    assert pure_spatial["spatial_error"] < pure_spatial["temporal_error"]
    assert pure_spatial["frame0_spatial_error"] < pure_spatial["frame0_temporal_error"]
    assert pure_temporal["temporal_error"] < pure_temporal["spatial_error"]
    assert pure_temporal["frame0_temporal_error"] < pure_temporal["frame0_spatial_error"]
    # A purely temporal head loses almost nothing in its layout, frame 0's queries included.
    assert pure_temporal["frame0_temporal_error"] < 1e-3 * pure_temporal["frame0_spatial_error"]
