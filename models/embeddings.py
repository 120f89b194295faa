"""Input embeddings of the Wan transformer: video patches, timestep and text.

The time embedder keeps float32 parameters whatever ``param_dtype`` is, because the reference keeps
it in float32 (``_keep_in_fp32_modules``): the sinusoid of t up to 1000 loses too much in bfloat16.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx


def timestep_embedding(timestep: jax.Array, dim: int, max_period: float = 10000.0) -> jax.Array:
    """Sinusoidal embedding of diffusion timesteps, cosine half first.

    Args:
        timestep: [B] timesteps (float, 0..1000).
        dim: embedding width (even).
        max_period: lowest frequency is 1 / max_period.

    Returns:
        float32 [B, dim]: [cos(t * f_i), sin(t * f_i)] with f_i = max_period^(-i / (dim / 2)).
    """
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    angles = timestep.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


class PatchEmbed(nnx.Module):
    """Non-overlapping 3D patch embedding (a Conv3d with stride = kernel), as one matmul.

    ``kernel`` is [C, pt, ph, pw, dim]: PyTorch's Conv3d weight [dim, C, pt, ph, pw] moved to the
    back axis, so loading is one transpose.

    Args:
        in_channels: latent channels C.
        dim: model width.
        patch_size: (pt, ph, pw).
        dtype: compute dtype.
        param_dtype: parameter dtype.
        rngs: initialisation randomness.
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        patch_size: tuple[int, int, int],
        *,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> None:
        self.patch_size = patch_size
        self.dtype = dtype
        shape = (in_channels, *patch_size, dim)
        # Same scale as nnx.Linear's default (LeCun normal), fan-in over C * pt * ph * pw.
        init = jax.nn.initializers.variance_scaling(
            1.0, "fan_in", "truncated_normal", in_axis=(0, 1, 2, 3), out_axis=4
        )
        self.kernel = nnx.Param(init(rngs.params(), shape, param_dtype))
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        """Embeds patches.

        Args:
            x: [B, C, F, H, W] latents; F, H, W divisible by the patch size.

        Returns:
            [B, N, dim] tokens in frame-major order (F/pt, H/ph, W/pw) flattened.
        """
        b, c, f, h, w = x.shape
        pt, ph, pw = self.patch_size
        x = x.astype(self.dtype).reshape(b, c, f // pt, pt, h // ph, ph, w // pw, pw)
        # Accumulate and add the bias in float32, rounding once, as torch's bfloat16 Conv3d does.
        out = jnp.einsum(
            "bcfihjwk,cijkd->bfhwd",
            x,
            self.kernel[...].astype(self.dtype),
            preferred_element_type=jnp.float32,
        ) + self.bias[...].astype(jnp.float32)
        return out.astype(self.dtype).reshape(b, -1, out.shape[-1])


class TimeTextEmbedding(nnx.Module):
    """Timestep → (temb, per-block modulation input) and text context → model width.

    Mirrors diffusers' ``WanTimeTextImageEmbedding`` for text-to-video: ``time_embedder``
    (Linear → SiLU → Linear, float32 parameters), ``time_proj`` (Linear dim → 6 dim on SiLU(temb))
    and ``text_embedder`` (Linear → GELU-tanh → Linear).

    Args:
        dim: model width.
        freq_dim: sinusoid width.
        text_dim: context width.
        dtype: compute dtype.
        param_dtype: parameter dtype (except the time embedder, always float32).
        rngs: initialisation randomness.
    """

    def __init__(
        self,
        dim: int,
        freq_dim: int,
        text_dim: int,
        *,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> None:
        self.freq_dim = freq_dim
        self.dtype = dtype
        f32 = {"dtype": jnp.float32, "param_dtype": jnp.float32, "rngs": rngs}
        low = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.time_linear_1 = nnx.Linear(freq_dim, dim, **f32)
        self.time_linear_2 = nnx.Linear(dim, dim, **f32)
        self.time_proj = nnx.Linear(dim, 6 * dim, **low)
        self.text_linear_1 = nnx.Linear(text_dim, dim, **low)
        self.text_linear_2 = nnx.Linear(dim, dim, **low)

    def __call__(
        self, timestep: jax.Array, context: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Embeds timestep and text.

        Args:
            timestep: [B] timesteps.
            context: [B, L, text_dim] text-encoder output.

        Returns:
            ``(temb, modulation, text)``: temb [B, dim] and modulation [B, 6, dim] and
            text [B, L, dim], all in the compute dtype.
        """
        sinusoid = timestep_embedding(timestep, self.freq_dim)
        temb = self.time_linear_2(jax.nn.silu(self.time_linear_1(sinusoid))).astype(self.dtype)
        # Activations in float32, rounded once to the compute dtype, as torch's bfloat16 kernels do
        # (XLA on CPU would round every intermediate op to bfloat16).
        modulation = self.time_proj(jax.nn.silu(temb.astype(jnp.float32)).astype(self.dtype))
        modulation = modulation.reshape(modulation.shape[0], 6, -1)
        text = self.text_linear_1(context.astype(self.dtype))
        text = jax.nn.gelu(text.astype(jnp.float32), approximate=True).astype(self.dtype)
        text = self.text_linear_2(text)
        return temb, modulation, text
