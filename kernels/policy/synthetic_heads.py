"""Layout-neutral synthetic attention heads with a chosen temporal share, to check routing against.

A head here scores a key by what it shares with the query, never by where either sits in a layout:

    score(q, k) = a  when k is q's spatial position in another frame   (temporal structure)
                  b  when k is another position of q's own frame        (spatial structure)
                  max(a, b) when k is q itself,  0 otherwise.

``a`` and ``b`` are set so that, for every query, a share ``temporal_share`` of the structured
attention mass (everything but the query itself and the unstructured rest) lies on its own position
in the other frames and the remainder on its own frame; the unstructured rest keeps about
``1 / (1 + strength)`` of the mass. The scores come from q, k inner products of one-hot features
(position, frame, and the token itself to cancel the double count on the diagonal), so
``kernels.policy.routing`` sees them exactly as it sees a model's heads. Values are seeded Gaussian
noise: the error a mask makes is then the mass it drops, whatever that mass is.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from kernels.masks.geometry import TokenGeometry


def share_logits(geometry: TokenGeometry, temporal_share: float, strength: float) -> tuple:
    """The temporal and spatial logits (a, b) that give ``temporal_share`` of the structured mass.

    Args:
        geometry: token geometry (F frames of S tokens).
        temporal_share: fraction of the structured mass on the query's position in other frames,
            in [0, 1].
        strength: structured mass over unstructured mass (> 0).

    Returns:
        (a, b) in nats; a share of 0 or 1 leaves that kind unstructured (logit 0).
    """
    if not 0.0 <= temporal_share <= 1.0:
        raise ValueError(f"temporal_share={temporal_share}: expected a fraction in [0, 1]")
    if strength <= 0:
        raise ValueError(f"strength={strength}: expected a positive mass ratio")
    s, f, n = geometry.tokens_per_frame, geometry.frames, geometry.tokens
    if f < 2 or s < 2:
        raise ValueError(f"{geometry}: a mixed head needs at least 2 frames of at least 2 tokens")
    structured = strength * n  # total structured mass against ~n unit-weight other keys

    def logit(share: float, count: int) -> float:
        return math.log(share * structured / count) if share > 0 else 0.0

    return logit(temporal_share, f - 1), logit(1.0 - temporal_share, s - 1)


def mixed_head(
    geometry: TokenGeometry,
    temporal_shares: tuple[float, ...],
    *,
    strength: float = 50.0,
    value_dim: int = 8,
    seed: int = 0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q, k, v of one batch with one synthetic head per temporal share.

    Args:
        geometry: token geometry (frame-major token order, as the model's).
        temporal_shares: one share in [0, 1] per head.
        strength: structured over unstructured attention mass.
        value_dim: channels of the Gaussian values.
        seed: seed of the values.

    Returns:
        (q, k, v): q and k float32 [1, N, heads, S + F + N] (the score features), v float32
        [1, N, heads, S + F + N] with Gaussian values in its first ``value_dim`` channels and zeros
        after (q, k and v share one head_dim, as the routing contract asks).
    """
    s, f, n = geometry.tokens_per_frame, geometry.frames, geometry.tokens
    if value_dim > s + f + n:
        raise ValueError(f"value_dim={value_dim}: at most {s + f + n} channels")
    token = np.arange(n)
    position, frame = np.eye(s)[token % s], np.eye(f)[token // s]  # [N, S], [N, F]
    identity = np.eye(n)
    dim = s + f + n
    scale = dim**0.25  # routing divides scores by sqrt(head_dim)
    qs, ks = [], []
    for share in temporal_shares:
        a, b = share_logits(geometry, share, strength)
        # q.k = a [same position] + b [same frame] - min(a, b) [same token]; a, b >= 0 here
        # whenever the share is structured, so the square roots are real.
        a, b = max(a, 0.0), max(b, 0.0)
        shared = np.concatenate([math.sqrt(a) * position, math.sqrt(b) * frame], axis=1)
        cancel = math.sqrt(min(a, b)) * identity
        qs.append(np.concatenate([shared, -cancel], axis=1) * scale)
        ks.append(np.concatenate([shared, cancel], axis=1) * scale)
    q = jnp.asarray(np.stack(qs, axis=1)[None], jnp.float32)
    k = jnp.asarray(np.stack(ks, axis=1)[None], jnp.float32)
    values = jax.random.normal(jax.random.key(seed), (1, n, len(temporal_shares), value_dim))
    v = jnp.pad(values, ((0, 0), (0, 0), (0, 0), (0, dim - value_dim)))
    return q, k, v


# The spectrum of temporal shares routing is checked on (docs/against-sparse-videogen.md).
SPECTRUM = (0.0, 0.3, 0.45, 0.5, 0.55, 0.7, 1.0)


def routing_spectrum(
    geometry: TokenGeometry, density: float, shares: tuple[float, ...] = SPECTRUM
) -> list[dict[str, float | str]]:
    """Routing of one synthetic head per share: errors on every row and on frame 0's rows.

    Args:
        geometry: token geometry.
        density: kept fraction of the band both masks use.
        shares: temporal shares, one head each.

    Returns:
        One dict per share: ``share``, ``spatial_error`` / ``temporal_error`` over every query row,
        ``routed`` ("spatial" or "temporal", from every row), and ``frame0_spatial_error`` /
        ``frame0_temporal_error`` over frame 0's rows.
    """
    from kernels.masks.band import band_for_density
    from kernels.policy.routing import route_rows

    q, k, v = mixed_head(geometry, shares)
    mask = band_for_density(geometry, density)
    every = route_rows(q, k, v, jnp.arange(geometry.tokens, dtype=jnp.int32), mask, geometry)
    frame0 = jnp.arange(geometry.tokens_per_frame, dtype=jnp.int32)
    first = route_rows(q, k, v, frame0, mask, geometry)
    return [
        {
            "share": share,
            "spatial_error": float(every.spatial_error[0, i]),
            "temporal_error": float(every.temporal_error[0, i]),
            "routed": "temporal" if bool(every.temporal[0, i]) else "spatial",
            "frame0_spatial_error": float(first.spatial_error[0, i]),
            "frame0_temporal_error": float(first.temporal_error[0, i]),
        }
        for i, share in enumerate(shares)
    ]
