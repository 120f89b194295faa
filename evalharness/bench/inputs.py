"""Synthetic q, k, v for the benchmark."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def random_qkv(tokens: int, heads: int, head_dim: int, dtype, seed: int = 0, batch: int = 1):
    """Standard-normal q, k, v of shape [batch, tokens, heads, head_dim] in ``dtype``."""
    keys = jax.random.split(jax.random.key(seed), 3)
    shape = (batch, tokens, heads, head_dim)
    return tuple(jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
