"""The VAE decode of one latent shape, compiled ahead of time: latents -> uint8 frames.

A run compiles its decode once, as a phase of its own (``VAE compile``), and every decode after
it (each arm, each pair) runs the same executable: the tiled program of :func:`models.vae.decode_tiled`
for Wan videos, the untiled one of :func:`models.vae.decode_unclipped` for the tiny presets. The
frames equal :func:`models.vae.decode_to_frames`' bit for bit: the same traced functions, lowered
and compiled explicitly instead of on their first call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.frames import video_to_uint8
from models.vae import (
    TilingConfig,
    WanVAE,
    _decode_split,
    _decode_tiled_split,
    _is_tiled,
    _validate_latents,
    unnormalize_latents,
)
from models.vae_tiling import tile_blend_weights, tile_windows


class DecodeProgram:
    """One latent shape's decode, compiled on construction.

    Args:
        vae: the decoder (its weights are captured as they are now).
        latent_shape: ``(B, z_dim, F, h, w)`` of the normalised latents it decodes.
        tiling: the run's tiling (None: the whole frame at once), as ``decode_to_frames`` takes it.
    """

    def __init__(
        self, vae: WanVAE, latent_shape: tuple[int, ...], tiling: TilingConfig | None
    ) -> None:
        struct = jax.ShapeDtypeStruct(tuple(latent_shape), jnp.float32)
        _validate_latents(vae.config, struct)
        self.vae, self.latent_shape = vae, tuple(latent_shape)
        graphdef, self._state = nnx.split(vae)
        self.tiled = _is_tiled(vae.config, struct, tiling)
        if self.tiled:
            h, w = latent_shape[-2:]
            scale = vae.config.scale_factor_spatial
            windows = tile_windows(tiling, h, w, scale)
            self._weights = jnp.asarray(tile_blend_weights(tiling, h, w, scale))
            lowered = _decode_tiled_split.lower(
                graphdef, windows, True, self._state, struct, self._weights
            )
        else:
            b, c, f, h, w = latent_shape
            z = jax.ShapeDtypeStruct((b, f, h, w, c), jnp.float32)
            lowered = _decode_split.lower(graphdef, self._state, z)
        self.compiled = lowered.compile()

    def __call__(self, latents: np.ndarray | jax.Array) -> list[np.ndarray]:
        """Normalised latents of the compiled shape -> one uint8 ``[T, 8h, 8w, 3]`` video per
        batch entry.

        Raises:
            ValueError: latents of another shape, or a decoded video with NaN or inf values.
        """
        if tuple(latents.shape) != self.latent_shape:
            raise ValueError(
                f"latents of shape {tuple(latents.shape)}; this decode was compiled for "
                f"{self.latent_shape}"
            )
        latents = jnp.asarray(latents, jnp.float32)
        if not self.tiled:
            z = jnp.moveaxis(unnormalize_latents(self.vae.config, latents), 1, -1)
            video = np.asarray(jnp.clip(self.compiled(self._state, z), -1.0, 1.0))
            return [video_to_uint8(v) for v in video]
        video, finite = self.compiled(self._state, latents, self._weights)
        if not bool(finite):
            raise ValueError("video holds NaN or inf values; the decoder or the latents diverged")
        video = np.asarray(video)
        width = self.latent_shape[-1] * self.vae.config.scale_factor_spatial
        return list(video.reshape(*video.shape[:3], width, -1))
