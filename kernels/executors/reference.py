"""Dense masked attention in plain jnp: the oracle every executor is tested against (small N only).

Materialises the [batch, heads, N, N] scores and the [N, N] mask, so it is O(N^2) in memory.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def reference_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask=None) -> jax.Array:
    """softmax(q k^T / sqrt(d) + mask) v, computed in float32.

    Query rows whose mask keeps no key return zeros (the executors' convention).

    Args:
        q: [batch, tokens, heads, head_dim].
        k: [batch, tokens, heads, head_dim].
        v: [batch, tokens, heads, head_dim].
        mask: None (dense) or any kernels mask with ``dense()`` giving bool [tokens, tokens].

    Returns:
        [batch, tokens, heads, head_dim] in q's dtype.
    """
    d = q.shape[-1]
    qf, kf, vf = (jnp.asarray(x, jnp.float32) for x in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", qf, kf) / np.sqrt(d)
    if mask is not None:
        keep = jnp.asarray(mask.dense())
        scores = jnp.where(keep[None, None], scores, -jnp.inf)
    row_max = jnp.max(scores, axis=-1, keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    weights = jnp.exp(scores - row_max)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    weights = weights / jnp.where(total == 0, 1.0, total)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, vf).astype(q.dtype)
