"""Seeded random parameter init that costs no per-shape compilation.

Eager ``jax.random.normal`` compiles one XLA program per parameter shape (tens of seconds for the tiny
VAE on a busy CPU). Here each parameter takes one key from ``rngs``, turns it into a NumPy seed and
draws on the host; the result is still a deterministic function of the ``nnx.Rngs`` seed. Under
tracing (``nnx.eval_shape`` when a checkpoint will overwrite every value) the key is abstract, so the
JAX draw is used, which only costs a shape.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def seeded_normal(rngs: nnx.Rngs, shape: tuple[int, ...], scale: float, dtype) -> jax.Array:
    """``scale · N(0, 1)`` of ``shape``, seeded by the next ``rngs.params()`` key.

    Args:
        rngs: the module's random streams.
        shape: parameter shape.
        scale: standard deviation.
        dtype: parameter dtype.

    Returns:
        The parameter array.
    """
    key = rngs.params()
    if isinstance(key, jax.core.Tracer):
        return jax.random.normal(key, shape, dtype) * scale
    seed = np.asarray(jax.random.key_data(key)).astype(np.uint32)
    draw = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * scale
    return jnp.asarray(draw, dtype=dtype)
