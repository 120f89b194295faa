"""The run's decode, compiled ahead of time: the same frames as ``decode_to_frames``, bit for
bit, tiled or not, and a refusal for latents of another shape."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from models.vae import WanVAE, decode_to_frames
from models.vae_program import DecodeProgram
from tests.helpers.mini_vae import LATENT_SHAPE, MINI_VAE_CONFIG, TILING


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
