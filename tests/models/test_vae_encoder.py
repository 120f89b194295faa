"""The Wan VAE's encoder (parity with diffusers' AutoencoderKLWan.encode), the whole-clip decode
training uses (equal to the harness's chunked decode), and the saved folder read back."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from models.tiny_components import TINY_VAE_CONFIG
from models.vae import decode_unclipped, load_vae
from models.vae_encoder import (
    WanAutoencoder,
    decode_whole_clip,
    load_autoencoder,
    save_autoencoder,
)
from tests.helpers.numerics import assert_allclose


@pytest.fixture(scope="module")
def autoencoder():
    return WanAutoencoder(TINY_VAE_CONFIG, rngs=nnx.Rngs(0))


@pytest.mark.slow
def test_the_whole_clip_decode_is_the_chunked_decode(autoencoder):
    z = jnp.asarray(np.random.default_rng(0).standard_normal((1, 4, 4, 6, 16)), jnp.float32)
    chunked = decode_unclipped(autoencoder.decoding, z)
    whole = decode_whole_clip(autoencoder.decoding, z)
    assert whole.shape == (1, 13, 32, 48, 3)
    assert_allclose(whole, chunked, atol=1e-4 * float(jnp.abs(chunked).max()))


@pytest.mark.parity
@pytest.mark.slow  # diffusers' encoder beside ours: about 8 s on 2 cores
def test_the_encoder_matches_diffusers(autoencoder, tmp_path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    save_autoencoder(autoencoder, tmp_path)
    reference = diffusers.AutoencoderKLWan.from_pretrained(tmp_path).eval()
    video = np.random.default_rng(1).uniform(-1, 1, (1, 9, 32, 48, 3)).astype(np.float32)
    with torch.no_grad():
        dist = reference.encode(torch.from_numpy(video).permute(0, 4, 1, 2, 3)).latent_dist
    mean, logvar = autoencoder.moments(jnp.asarray(video))
    expected = dist.mean.permute(0, 2, 3, 4, 1).numpy()
    assert mean.shape == expected.shape == (1, 3, 4, 6, 16)
    assert_allclose(mean, expected, atol=1e-4 * float(np.abs(expected).max()))
    assert_allclose(logvar, dist.logvar.permute(0, 2, 3, 4, 1).numpy(), atol=1e-4)


def test_the_saved_folder_loads_as_the_harness_decoder(autoencoder, tmp_path):
    save_autoencoder(autoencoder, tmp_path)
    vae = load_vae(tmp_path)
    assert vae.config == TINY_VAE_CONFIG
    z = jnp.asarray(np.random.default_rng(2).standard_normal((1, 2, 4, 6, 16)), jnp.float32)
    assert_allclose(decode_unclipped(vae, z), decode_unclipped(autoencoder.decoding, z), atol=1e-6)


def test_the_saved_folder_loads_back_as_the_whole_autoencoder(autoencoder, tmp_path):
    save_autoencoder(autoencoder, tmp_path)
    loaded = load_autoencoder(tmp_path)
    assert loaded.config == autoencoder.config
    saved = nnx.to_flat_state(nnx.state(autoencoder, nnx.Param))
    back = dict(nnx.to_flat_state(nnx.state(loaded, nnx.Param)))
    assert len(back) == len(saved) > 0
    for path, value in saved:
        assert np.array_equal(np.asarray(back[path].get_value()), np.asarray(value.get_value()))


def test_a_folder_with_a_missing_tensor_is_refused_naming_it(autoencoder, tmp_path):
    save_autoencoder(autoencoder, tmp_path)
    weights = tmp_path / "diffusion_pytorch_model.safetensors"
    tensors = load_file(str(weights))
    del tensors["encoder.conv_in.weight"]
    save_file(tensors, str(weights))
    with pytest.raises(ValueError, match="encoder.conv_in.weight"):
        load_autoencoder(tmp_path)
