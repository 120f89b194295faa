"""SVG head routing on sequence-sharded q/k/v, before the head exchange (inside ``shard_map``).

Each device holds a run of N / P frame-major tokens. The R sampled query rows (the same global rows
on every device: same key, same ``sample_rows``) are gathered by a psum of each device's own rows.
Each device scores them against its own keys; the three softmaxes of ``kernels.policy.routing.route_rows``
(dense, spatial mask, temporal mask) are combined across devices as an online softmax: the global
row maximum by ``pmax``, then the exponent sums and the exponent-weighted values by ``psum``. Every
device ends with the same [B, H] errors and flags, equal to single-device routing up to float
rounding (``kernels.policy.routing.route_rows`` is the oracle).

Cost per device: [R, N / P] scores, a 1 / P share of the single-device routing, plus all-reduces of
[B, R, H, D] and [B, H, R, D] (``kernels.parallel.exchange.exchange_bytes``). The keep flags are
built whole ([R, N] booleans, from R rows of the tile table) and sliced to the device's keys.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from kernels.masks.geometry import TokenGeometry
from kernels.policy.routing import Routing, layout_keeps


def gather_rows(x: jax.Array, rows: jax.Array, axis_name: str) -> jax.Array:
    """Rows of the global sequence from sequence-sharded ``x``, on every device.

    Args:
        x: [B, N / P, H, D], this device's tokens.
        rows: int32 [R], global frame-major rows (the same on every device).
        axis_name: the mesh axis.

    Returns:
        [B, R, H, D], identical on every device (each row is one device's value plus zeros).
    """
    local = x.shape[1]
    offset = rows - lax.axis_index(axis_name) * local
    inside = (offset >= 0) & (offset < local)
    taken = jnp.take(x, jnp.clip(offset, 0, local - 1), axis=1)
    return lax.psum(jnp.where(inside[None, :, None, None], taken, 0), axis_name)


def _sharded_softmax_output(
    scores: jax.Array, keep: jax.Array | None, v: jax.Array, axis_name: str
) -> jax.Array:
    """softmax over all devices' kept keys, times v: scores [B, H, R, N/P], v [B, N/P, H, D]."""
    if keep is not None:
        scores = jnp.where(keep[None, None], scores, -jnp.inf)
    top = lax.pmax(jnp.max(scores, axis=-1, keepdims=True), axis_name)
    # A row with no kept key anywhere keeps -inf; 0 keeps its exponents at 0 instead of NaN.
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    weights = jnp.exp(scores - top)
    total = lax.psum(jnp.sum(weights, axis=-1, keepdims=True), axis_name)
    values = lax.psum(jnp.einsum("bhrk,bkhd->bhrd", weights, v), axis_name)
    return values / total


def route_rows_sharded(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    rows: jax.Array,
    mask,
    geometry: TokenGeometry,
    axis_name: str,
) -> Routing:
    """``kernels.policy.routing.route_rows`` on sequence-sharded inputs (call inside ``shard_map``).

    Args:
        q: [B, N / P, H, D], this device's frame-major run of tokens.
        k: [B, N / P, H, D].
        v: [B, N / P, H, D].
        rows: int32 [R], global frame-major query rows.
        mask: the executed mask in a head's own layout (``mask.allowed`` on global indices).
        geometry: the global token geometry (N tokens).
        axis_name: the mesh axis the tokens are split over.

    Returns:
        ``Routing`` with [B, H] arrays, identical on every device; ties go to spatial.
    """
    local, d = k.shape[1], k.shape[3]
    if geometry.tokens % local:
        raise ValueError(f"{local} local tokens do not tile the {geometry.tokens} of {geometry}")
    f32 = jnp.float32
    qf, kf, vf = (x.astype(f32) for x in (q, k, v))
    q_rows = gather_rows(qf, rows, axis_name)  # [B, R, H, D]
    scores = jnp.einsum("brhd,bkhd->bhrk", q_rows, kf) / math.sqrt(d)
    # Every device builds the rows' [R, N] flags (cheap: a tile-table row per sampled row) and
    # keeps its own run of keys.
    start = lax.axis_index(axis_name) * local
    spatial_keep, temporal_keep = (
        lax.dynamic_slice_in_dim(keep, start, local, axis=1)
        for keep in layout_keeps(mask, rows, geometry)
    )
    dense = _sharded_softmax_output(scores, None, vf, axis_name)
    spatial = _sharded_softmax_output(scores, spatial_keep, vf, axis_name)
    temporal = _sharded_softmax_output(scores, temporal_keep, vf, axis_name)
    spatial_error = jnp.mean((spatial - dense) ** 2, axis=(2, 3))  # [B, H]
    temporal_error = jnp.mean((temporal - dense) ** 2, axis=(2, 3))
    return Routing(temporal_error < spatial_error, spatial_error, temporal_error)
