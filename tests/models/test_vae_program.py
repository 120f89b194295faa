"""The run's decode, compiled ahead of time: the same frames as ``decode_to_frames``, bit for
bit, tiled or not, and a refusal for latents of another shape."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from models.vae import WanVAE, WanVAEConfig, decode_to_frames
from models.vae_program import DecodeProgram
from models.vae_tiling import TilingConfig

# A mini VAE (one x2 upsampling level, 4 channels) and a 3 x 3 tile grid with cut edge tiles.
MINI_VAE_CONFIG = WanVAEConfig(
    base_dim=4,
    z_dim=4,
    dim_mult=(1, 2),
    num_res_blocks=1,
    temperal_downsample=(True,),
    latents_mean=(0.1, -0.2, 0.3, 0.0),
    latents_std=(0.9, 1.1, 1.0, 1.2),
    scale_factor_spatial=2,
    scale_factor_temporal=2,
)
TILING = TilingConfig(24, 24, 16, 16)
LATENT_SHAPE = (1, 4, 1, 22, 21)


@pytest.fixture(scope="module")
def mini_vae() -> WanVAE:
    return WanVAE(MINI_VAE_CONFIG, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("tiling", [TILING, None], ids=["tiled", "whole frame"])
def test_the_compiled_decode_gives_decode_to_frames_frames(mini_vae, tiling):
    shape = (1, *LATENT_SHAPE[1:])
    latents = jax.random.normal(jax.random.key(3), shape)
    program = DecodeProgram(mini_vae, shape, tiling)
    assert program.tiled is (tiling is not None)
    (frames,) = program(np.asarray(latents))
    (expected,) = decode_to_frames(mini_vae, latents, tiling=tiling)
    assert frames.dtype == np.uint8 and frames.shape == expected.shape
    np.testing.assert_array_equal(frames, expected)


def test_latents_of_another_shape_are_refused_by_name(mini_vae):
    program = DecodeProgram(mini_vae, (1, *LATENT_SHAPE[1:]), None)
    with pytest.raises(ValueError, match="compiled for"):
        program(np.zeros((1, 4, 1, 8, 8), np.float32))
