"""Normalisation and feed-forward layers of the Wan transformer.

Norms are float32 islands, as in the reference: they upcast their input, normalise in float32 and
leave the cast back to the caller (which applies modulation in float32 first) or cast to the input
dtype themselves (RMSNorm, used on bf16 q/k).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class RMSNorm(nnx.Module):
    """RMSNorm with a learned per-channel scale, computed in float32.

    Args:
        dim: channels normalised together (for Wan's q/k: all heads at once, heads * head_dim).
        eps: added to the mean square.
        param_dtype: dtype of ``scale``.
    """

    def __init__(self, dim: int, *, eps: float, param_dtype: jnp.dtype = jnp.float32) -> None:
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., dim] → [..., dim] in x.dtype."""
        x32 = x.astype(jnp.float32)
        inv_rms = jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return (x32 * inv_rms * self.scale[...].astype(jnp.float32)).astype(x.dtype)


class Float32LayerNorm(nnx.Module):
    """LayerNorm over the last axis in float32, optionally affine (parameters kept in float32).

    Args:
        dim: channels.
        eps: added to the variance.
        affine: learn ``scale`` and ``bias`` (Wan's norm2) or not (norm1, norm3, norm_out).
    """

    def __init__(self, dim: int, *, eps: float, affine: bool) -> None:
        self.eps = eps
        self.affine = affine
        if affine:
            self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
            self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., dim] → float32 [..., dim]."""
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        centred = x32 - mean
        var = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)
        y = centred * jax.lax.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.scale[...] + self.bias[...]
        return y


class FeedForward(nnx.Module):
    """Linear(dim → hidden) → GELU (tanh approximation) → Linear(hidden → dim).

    Args:
        dim: input and output channels.
        hidden_dim: inner width (``ffn_dim``).
        dtype: compute dtype.
        param_dtype: parameter dtype.
        rngs: initialisation randomness.
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        *,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> None:
        self.proj_in = nnx.Linear(dim, hidden_dim, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.proj_out = nnx.Linear(hidden_dim, dim, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., dim] → [..., dim] in the compute dtype."""
        h = self.proj_in(x)
        # GELU in float32, rounded once: torch's bfloat16 elementwise kernels compute in float32,
        # while XLA on CPU would round every intermediate op of the tanh formula to bfloat16.
        return self.proj_out(jax.nn.gelu(h.astype(jnp.float32), approximate=True).astype(h.dtype))
