"""The dtypes a model's weights and activations are given in by name (configs, command lines)."""

from __future__ import annotations

import jax.numpy as jnp

# The names accepted. float16 is counted by the memory model (stored checkpoints); the run's
# config offers float32 and bfloat16.
DTYPE_NAMES = ("float32", "bfloat16", "float16")


def dtype_of(name: str) -> jnp.dtype:
    """The JAX dtype of a dtype name (a config's dtype enum works too: it is its name).

    Raises:
        ValueError: the name is not one of :data:`DTYPE_NAMES`, naming the accepted ones.
    """
    name = str(name)
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype {name!r} is not supported; use one of {sorted(DTYPE_NAMES)}")
    return jnp.dtype(name)
