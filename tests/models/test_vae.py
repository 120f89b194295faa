"""Wan VAE decoder: parity with diffusers, tiling, loading errors, uint8 frames, memory budget."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.frames import video_to_uint8
from models.safetensors_reader import WeightsError
from models.tiny_components import TINY_VAE_CONFIG, tiny_vae
from models.vae import (
    TilingConfig,
    WanVAEConfig,
    decode_in_tiles,
    decode_latents,
    decode_tiles_reference,
    decode_tiling,
    decode_to_frames,
    estimate_tile_memory,
    load_vae,
)
from tests.helpers.numerics import assert_allclose

GiB = 2**30
# One latent shape (multi-frame, non-square) for every untiled decode: one compile for the module.
LATENT_SHAPE = (2, 16, 3, 4, 6)


@pytest.fixture(scope="module")
def reference_vae(tmp_path_factory):
    """A random tiny diffusers AutoencoderKLWan saved with save_pretrained, and its folder."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    ref = diffusers.AutoencoderKLWan(
        base_dim=8,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        # The tiny preset's statistics: same config, so the tiny tests reuse the compiled decoder.
        latents_mean=list(TINY_VAE_CONFIG.latents_mean),
        latents_std=list(TINY_VAE_CONFIG.latents_std),
    ).eval()
    with torch.no_grad():  # zero-initialised biases would leave parts of the port untested
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("vae")
    ref.save_pretrained(folder)
    return ref, folder


def _reference_decode(ref, latents: np.ndarray) -> np.ndarray:
    """The Wan pipeline's un-normalisation + AutoencoderKLWan.decode, channels last."""
    import torch

    cfg = ref.config
    z = torch.from_numpy(latents)
    std = torch.tensor(cfg.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1)
    mean = torch.tensor(cfg.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        out = ref.decode(z * std + mean).sample
    return out.permute(0, 2, 3, 4, 1).numpy()


@pytest.mark.parity
def test_decode_matches_diffusers(reference_vae):
    ref, folder = reference_vae
    vae = load_vae(folder)
    assert vae.config == TINY_VAE_CONFIG
    latents = np.random.default_rng(0).standard_normal(LATENT_SHAPE).astype(np.float32)
    expected = _reference_decode(ref, latents)
    ours = decode_latents(vae, jnp.asarray(latents))
    assert ours.shape == (2, 9, 32, 48, 3)
    assert_allclose(ours, expected, atol=1e-4)
    assert np.abs(expected).mean() > 0.05  # the comparison is not between two near-zero videos


@pytest.mark.parity
@pytest.mark.slow  # two tiled decodes, one in PyTorch: about 5 s on 2 cores
def test_tiled_decode_matches_diffusers_tiled_decode(reference_vae):
    ref, folder = reference_vae
    # One tile row; tiles of 4x6 latents (LATENT_SHAPE's, already compiled) every 3 columns, so
    # two blended seams and, in the reference's tile-by-tile decode, one extra compiled shape (the
    # 4x3 edge tile).
    tiling = TilingConfig(32, 48, 32, 24)
    latents = np.random.default_rng(1).standard_normal((2, 16, 3, 4, 9)).astype(np.float32)
    ref.enable_tiling(
        tile_sample_min_height=32,
        tile_sample_min_width=48,
        tile_sample_stride_height=32,
        tile_sample_stride_width=24,
    )
    try:
        expected = _reference_decode(ref, latents)
    finally:
        ref.use_tiling = False
    vae = load_vae(folder)
    ours = decode_tiles_reference(vae, jnp.asarray(latents), tiling)
    assert isinstance(ours, np.ndarray) and ours.shape == (2, 9, 32, 72, 3)
    assert_allclose(ours, expected, atol=1e-4)
    # The one-program decode differs only where the last tile (columns 48 on) was cut: it decodes
    # that tile from the full-size window ending at the edge.
    one_program = decode_latents(vae, jnp.asarray(latents), tiling=tiling)
    assert isinstance(one_program, np.ndarray) and one_program.shape == ours.shape
    assert_allclose(one_program[..., :48, :], expected[..., :48, :], atol=1e-4)


def test_tile_blending_reproduces_the_untiled_video():
    """If each tile decodes to its crop of the full video, blending must give the full video.

    This isolates the tile grid, the in-place linear blending and the crops from the decoder
    (whose tiles legitimately differ near seams because the mid-block attends over the whole frame).
    """
    rng = np.random.default_rng(0)
    h, w, scale = 11, 13, 8
    full = rng.standard_normal((2, 5, h * scale, w * scale, 3)).astype(np.float32)
    z = jnp.asarray(rng.standard_normal((2, 2, h, w, 16)).astype(np.float32))

    # Recover each tile's offset from its latent content.
    def decode_tile(tile):
        t = np.asarray(tile)
        for i in range(h):
            for j in range(w):
                if np.array_equal(np.asarray(z[:, :, i : i + t.shape[2], j : j + t.shape[3]]), t):
                    return full[
                        :,
                        :,
                        i * scale : (i + t.shape[2]) * scale,
                        j * scale : (j + t.shape[3]) * scale,
                    ].copy()
        raise AssertionError("tile not found in the latent")

    tiling = TilingConfig(48, 40, 32, 24)  # overlaps 16 and 16 pixels, ragged edge tiles
    assert_allclose(decode_in_tiles(decode_tile, z, tiling, scale), full, atol=1e-6)


def test_tiling_on_a_latent_that_fits_one_tile_is_the_untiled_decode():
    vae = tiny_vae(0)
    latents = jax.random.normal(jax.random.key(3), LATENT_SHAPE)
    untiled = decode_latents(vae, latents)
    tiled = decode_latents(vae, latents, tiling=TilingConfig())
    np.testing.assert_array_equal(np.asarray(tiled), np.asarray(untiled))


def test_tiny_vae_decodes_to_uint8_frames():
    vae = tiny_vae(0)
    latents = jax.random.normal(jax.random.key(0), LATENT_SHAPE)
    videos = decode_to_frames(vae, latents)
    assert len(videos) == 2
    for v in videos:
        assert v.shape == (9, 32, 48, 3) and v.dtype == np.uint8
        assert v.std() > 5  # not a constant image
    again = decode_to_frames(tiny_vae(0), latents)
    np.testing.assert_array_equal(videos[0], again[0])  # seeded weights are reproducible
    assert not np.array_equal(videos[0], videos[1])


def test_decode_rejects_wrong_latent_channels():
    with pytest.raises(ValueError, match="z_dim=16"):
        decode_latents(tiny_vae(0), jnp.zeros((2, 4, 3, 4, 6)))


def test_video_to_uint8_matches_the_reference_quantisation():
    video = np.array([-1.5, -1.0, -0.5, 0.0, 0.3, 1.0, 2.0], np.float32)
    video = np.broadcast_to(video[:, None, None, None], (7, 1, 1, 3))
    out = video_to_uint8(video)
    expected = np.round(np.clip(video / 2 + 0.5, 0, 1) * 255).astype(np.uint8)
    np.testing.assert_array_equal(out, expected)
    assert out[:, 0, 0, 0].tolist() == [0, 0, 64, 128, 166, 255, 255]
    with pytest.raises(ValueError, match=r"\[T, H, W, 3\]"):
        video_to_uint8(np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="NaN"):
        video_to_uint8(np.full((1, 1, 1, 3), np.nan))


def test_load_vae_errors_name_the_problem(tmp_path, reference_vae):
    _, folder = reference_vae
    with pytest.raises(WeightsError, match="does not exist"):
        load_vae(tmp_path / "nope")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text((folder / "config.json").read_text())
    data = (folder / "diffusion_pytorch_model.safetensors").read_bytes()
    (corrupt / "diffusion_pytorch_model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(WeightsError, match="not a readable safetensors"):
        load_vae(corrupt)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(WeightsError, match="No weights"):
        load_vae(no_weights)
    wider = tmp_path / "wider"
    wider.mkdir()
    cfg = json.loads((folder / "config.json").read_text())
    cfg["base_dim"] = 16
    (wider / "config.json").write_text(json.dumps(cfg))
    (wider / "diffusion_pytorch_model.safetensors").write_bytes(data)
    with pytest.raises(WeightsError, match="Shape mismatch"):
        load_vae(wider)


def test_config_rejects_wan22_and_bad_tiling():
    with pytest.raises(ValueError, match="Wan 2.2"):
        WanVAEConfig.from_dict({"is_residual": True, "z_dim": 48})
    with pytest.raises(ValueError, match="multiples of 8"):
        TilingConfig(256, 256, 100, 192)


def test_real_vae_1440p_fits_16_gib_only_with_tiling():
    real = WanVAEConfig()  # the defaults are the Wan 2.1 VAE
    assert (real.base_dim, real.z_dim, real.dim_mult) == (96, 16, (1, 2, 4, 4))
    tiling = TilingConfig()
    tile = estimate_tile_memory(real, (tiling.tile_sample_min_height // 8,) * 2, frames=21)
    untiled = estimate_tile_memory(real, (180, 320), frames=21)
    assert tile["total"] < 16 * GiB
    assert untiled["total"] > 16 * GiB
    assert 0.2 * GiB < tile["weights"] < 0.35 * GiB  # ~73M decoder parameters in float32


@pytest.mark.parametrize("name", ["tiny-planted", "tiny-random", "tiny"])
def test_tiny_presets_decode_in_one_call(name):
    assert decode_tiling(name) is None


def test_wan_models_decode_in_diffusers_tiles():
    assert decode_tiling("wan2.1-t2v-14b") == TilingConfig() == TilingConfig(256, 256, 192, 192)
