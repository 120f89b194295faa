"""The tiled VAE decode as one program: one compile per latent shape, the reference's blending.

A mini VAE (one ×2 upsampling level, 4 channels) keeps every compile around a second or two; its
mid-block attention still makes tiles differ from the untiled decode, as the real VAE's does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models.vae as vae_module
from models.frames import video_to_uint8
from models.peak_memory import vae_tiled_decode_memory
from models.tiny_components import TINY_VAE_CONFIG
from models.vae import (
    WanVAE,
    decode_latents,
    decode_tiled,
    decode_tiles_reference,
    decode_to_frames,
)
from models.vae_tiling import (
    TilingConfig,
    blend_windows,
    decode_in_tiles,
    tile_blend_weights,
    tile_windows,
)
from tests.helpers.mini_vae import LATENT_SHAPE, MINI_VAE_CONFIG, TILING
from tests.helpers.numerics import assert_allclose


@pytest.fixture(scope="module")
def mini_vae() -> WanVAE:
    return WanVAE(MINI_VAE_CONFIG, rngs=nnx.Rngs(0))


def _latents(seed: int, shape=LATENT_SHAPE) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape)


def _first_cut_px(spans: list[tuple[int, int]], size: int, scale: int) -> int:
    """Pixel where the first tile cut at the edge starts (the end of the interior)."""
    return next(start for start, length in spans if length < size) * scale


@pytest.fixture(scope="module")
def decoded(mini_vae):
    """The new tiled decode (float and uint8), the reference's and the untiled decode."""
    latents = _latents(1)
    new, finite = decode_tiled(mini_vae, latents, TILING)
    frames, _ = decode_tiled(mini_vae, latents, TILING, to_uint8=True)
    assert finite
    return {
        "new": new,
        "frames": frames,
        "old": decode_tiles_reference(mini_vae, latents, TILING),
        "untiled": np.asarray(decode_latents(mini_vae, latents)),
    }


def test_tiled_decode_compiles_once_for_four_tile_shapes(mini_vae, monkeypatch):
    rows, cols = TILING.latent_grid(*LATENT_SHAPE[-2:], MINI_VAE_CONFIG.scale_factor_spatial)
    assert len({(m, n) for _, m in rows for _, n in cols}) == 4  # four compiles the old way
    traces = []

    def counted(*args, **kwargs):
        traces.append(1)
        return blend_windows(*args, **kwargs)

    monkeypatch.setattr(vae_module, "blend_windows", counted)
    program = vae_module._decode_tiled_split
    program.clear_cache()
    first = decode_to_frames(mini_vae, _latents(2), tiling=TILING)
    assert (len(traces), program._cache_size()) == (1, 1)
    second = decode_to_frames(mini_vae, _latents(3), tiling=TILING)
    assert (len(traces), program._cache_size()) == (1, 1)  # same shape: no new trace or compile
    assert len(first) == len(second) == 2
    assert first[0].shape == (1, 44, 42, 3) and first[0].dtype == np.uint8
    assert not np.array_equal(first[0], second[0])


def test_tiled_decode_matches_the_reference_within_the_tiling_error(decoded):
    new, old, untiled = decoded["new"], decoded["old"], decoded["untiled"]
    assert new.shape == old.shape == untiled.shape == (2, 1, 44, 42, 3)
    assert new.dtype == np.float32
    err_old = np.abs(old - untiled).max()
    err_new = np.abs(new - untiled).max()
    assert np.abs(new - old).max() <= err_old
    assert err_new <= err_old + 1e-3
    assert np.abs(new - untiled).mean() <= np.abs(old - untiled).mean() + 1e-4
    # Away from the tiles cut at the bottom and right edges every window is the old tile.
    scale = MINI_VAE_CONFIG.scale_factor_spatial
    rows, cols = TILING.latent_grid(*LATENT_SHAPE[-2:], scale)
    y, x = _first_cut_px(rows, 12, scale), _first_cut_px(cols, 12, scale)
    assert (y, x) == (32, 32)
    assert_allclose(new[:, :, :y, :x], old[:, :, :y, :x], atol=1e-5)


def test_tiled_uint8_frames_equal_video_to_uint8_of_the_float_video(decoded, mini_vae):
    frames, new = decoded["frames"], decoded["new"]
    assert frames.dtype == np.uint8
    for b in range(frames.shape[0]):
        np.testing.assert_array_equal(frames[b], video_to_uint8(new[b]))
    bad = _latents(1).at[0, 0, 0, 5, 5].set(jnp.nan)
    with pytest.raises(ValueError, match="NaN"):
        decode_to_frames(mini_vae, bad, tiling=TILING)


@pytest.mark.parametrize("hw", [(12, 12), (7, 9)], ids=["one_tile", "smaller"])
def test_latents_within_one_tile_take_the_untiled_path(mini_vae, hw):
    latents = _latents(4, (1, 4, 1, *hw))
    compiled = vae_module._decode_tiled_split._cache_size()
    tiled = decode_latents(mini_vae, latents, tiling=TILING)
    np.testing.assert_array_equal(np.asarray(tiled), np.asarray(decode_latents(mini_vae, latents)))
    frames = decode_to_frames(mini_vae, latents, tiling=TILING)
    np.testing.assert_array_equal(frames[0], decode_to_frames(mini_vae, latents)[0])
    assert vae_module._decode_tiled_split._cache_size() == compiled


@pytest.mark.parametrize(
    ("tiling", "hw"),
    [
        (TilingConfig(32, 32, 24, 24), (8, 10)),
        (TilingConfig(48, 40, 32, 24), (11, 13)),
        (TilingConfig(48, 48, 16, 16), (13, 11)),  # three tiles overlap: three colours a side
        (TilingConfig(), (90, 160)),  # 720p
        (TilingConfig(), (60, 104)),  # 480p: the last two tile columns share a window
        (TilingConfig(), (50, 33)),  # two tiles cut at each edge
        (TilingConfig(), (20, 70)),  # lower than one tile
    ],
)
def test_blend_weights_reproduce_the_reference_blending(tiling, hw):
    """Random window contents, blended by the weights, equal the reference's blending of the kept
    parts of the same windows."""
    h, w, scale = *hw, 8
    windows = tile_windows(tiling, h, w, scale)
    weights = tile_blend_weights(tiling, h, w, scale)
    s_h, s_w = windows.window_px
    rng = np.random.default_rng(0)
    shape = (len(windows.row_starts), len(windows.col_starts), s_h, s_w)
    contents = rng.standard_normal(shape).astype(np.float32)

    def decode_tile(tile):  # the kept part of the tile's window
        r, c = (int(v) for v in tile[0, 0, 0, 0])
        k, m = windows.window_of(r, c)
        y, x = (r - windows.row_starts[k]) * scale, (c - windows.col_starts[m]) * scale
        kept = contents[k, m, y : y + tile.shape[2] * scale, x : x + tile.shape[3] * scale]
        return kept[None, None, :, :, None].copy()

    coords = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), axis=-1)
    expected = decode_in_tiles(decode_tile, coords[None, None], tiling, scale)[0, 0, :, :, 0]
    blended = np.zeros((h * scale, w * scale))
    for k, y0 in enumerate(windows.row_starts):
        for m, x0 in enumerate(windows.col_starts):
            y, x = y0 * scale, x0 * scale
            blended[y : y + s_h, x : x + s_w] += weights[k, m] * contents[k, m]
    assert_allclose(blended, expected, atol=1e-6)


@pytest.mark.parametrize(
    ("tiling", "hw"),
    [
        (TilingConfig(48, 40, 32, 24), (11, 13)),
        (
            TilingConfig(64, 64, 48, 48),
            (14, 22),
        ),  # shared windows: 3 tile rows in 2, 4 columns in 3
    ],
)
def test_blend_windows_of_a_local_decoder_is_the_reference(tiling, hw):
    """With a pixel-local "decoder" a window's pixels do not depend on where it was cut, so the
    device blending (row strips, shifted edge windows, float and uint8) must reproduce the
    reference's host blending."""
    h, w, scale = *hw, 8
    z = jax.random.normal(jax.random.key(0), (2, 3, h, w, 4))

    def decode(tile, xp=jnp):  # [B, F, th, tw, 4] → [B, 1 + 4(F-1), 8th, 8tw, 3]: its latent's
        up = xp.repeat(xp.repeat(tile[..., :3], scale, axis=2), scale, axis=3)
        return xp.concatenate([up[:, :1], xp.repeat(up[:, 1:], 4, axis=1)], axis=1)

    z_host = np.asarray(z)
    expected = np.clip(decode_in_tiles(lambda t: decode(t, np), z_host, tiling, scale), -1.0, 1.0)
    windows = tile_windows(tiling, h, w, scale)
    weights = jnp.asarray(tile_blend_weights(tiling, h, w, scale))

    @jax.jit
    def run(z, weights):
        video, _ = blend_windows(decode, z, windows, weights, to_uint8=False)
        frames, finite = blend_windows(decode, z, windows, weights, to_uint8=True)
        return video, frames, finite

    video, frames, finite = run(z, weights)
    assert bool(finite)
    video = np.asarray(video).reshape(expected.shape)  # the channels come folded into the width
    frames = np.asarray(frames).reshape(expected.shape)
    assert_allclose(video, expected, atol=1e-6)
    # The blend is a partition of unity.
    assert_allclose(video, np.clip(decode(z_host, np), -1.0, 1.0), atol=1e-6)
    for b in range(z.shape[0]):
        np.testing.assert_array_equal(frames[b], video_to_uint8(video[b]))


def test_tiled_decode_memory_estimate_is_within_25_percent_of_xla():
    """The tiny Wan VAE's one-program decode of 360 x 640 pixels (2 x 3 windows of 256 pixels),
    compiled on CPU: the estimate preflight can use against XLA's own figure."""
    config, tiling, shape = TINY_VAE_CONFIG, TilingConfig(), (1, 16, 3, 45, 80)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0))))
    h, w = shape[-2:]
    windows = tile_windows(tiling, h, w, config.scale_factor_spatial)
    weights = tile_blend_weights(tiling, h, w, config.scale_factor_spatial)
    compiled = vae_module._decode_tiled_split.lower(
        graphdef,
        windows,
        True,
        state,
        jax.ShapeDtypeStruct(shape, jnp.float32),
        jax.ShapeDtypeStruct(weights.shape, jnp.float32),
    ).compile()
    stats = compiled.memory_analysis()
    xla = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    estimate = vae_tiled_decode_memory(config, (h, w), shape[2], tiling, host_cpu=True).peak
    assert abs(estimate - xla) <= 0.25 * xla, (estimate, xla)
