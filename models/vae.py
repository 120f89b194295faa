"""Wan 2.1 VAE decoder in Flax NNX: normalised latents → RGB video in [-1, 1], optionally tiled.

Faithful to diffusers' ``AutoencoderKLWan.decode`` (checked to 1e-4 in float32 by the parity tests):
``post_quant_conv``, then the decoder one latent frame at a time with feature caches (see
``models/vae_blocks.py``). The chunk loop is a ``lax.scan`` over latent frames 1..F-1 with a
fixed-shape cache carry; frame 0 is a separate call because it decodes to one frame, not four.
Only the decoder is ported (text-to-video never encodes); the encoder's weights are skipped on load.

Memory budget (real VAE: base_dim 96, z_dim 16, dim_mult (1, 2, 4, 4); float32, 81 frames)
-----------------------------------------------------------------------------------------
Latent 21×180×320 at 1440p. Every causal conv keeps two frames of its input as a cache, and at full
resolution those are large: :func:`estimate_tile_memory` puts an *untiled* 1440p decode at
~32.5 GiB of caches + ~13 GiB of chunk activations + 3.3 GiB of output (~49 GiB): 1440p needs tiling.

Tiled decode: one program, one compile
--------------------------------------
With tiling on (the default :class:`TilingConfig`: 256×256-pixel tiles = 32×32 latents, stride 192)
the whole decode is one ``jax.jit`` keyed on the latent shape (:func:`decode_tiled`; the windows,
weights and row strips are explained in ``models/vae_tiling.py``): the decoder compiles once
whatever the grid (the reference's tile-by-tile decode, :func:`decode_tiles_reference`, compiled
up to four tile shapes), and only uint8 frames reach the host. Device peak, float32, 81 frames
(:func:`models.peak_memory.vae_tiled_decode_memory` / XLA's ``memory_analysis()`` on CPU): one
window's decode 1.66 GiB (caches 0.58 + chunk activations 0.75 + window output 0.06 + weights
0.27; XLA 1.64 for the window program alone) plus the float32 row strip and the uint8 rows and
video: **2.43 GiB** at 720p (XLA 2.30), **2.07 GiB** at 480p (XLA 2.03), **4.11 GiB** at 1440p
(XLA 3.52), inside a 16 GiB activation budget (bfloat16 halves the decoder's part). The float32
variant (``to_uint8=False``: :func:`decode_latents`, tests) emits 4 × the output bytes.
"""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.config import TINY_PRESETS
from models.frames import video_to_uint8
from models.safetensors_reader import (
    WeightsError,
    find_weight_files,
    load_torch_layout,
    read_json,
    save_torch_layout,
)
from models.vae_blocks import CACHE_FRAMES, CausalConv3d, Decoder3d
from models.vae_tiling import (
    TileWindows,
    TilingConfig,
    blend_windows,
    decode_in_tiles,
    tile_blend_weights,
    tile_windows,
)

WAN21_LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
WAN21_LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class WanVAEConfig:
    """The ``vae/config.json`` fields the decoder needs (diffusers ``AutoencoderKLWan`` names)."""

    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    # Wan 2.1's published per-channel latent statistics (vae/config.json of every Wan 2.1 checkpoint).
    latents_mean: tuple[float, ...] = WAN21_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN21_LATENTS_STD
    out_channels: int = 3
    scale_factor_spatial: int = 8
    scale_factor_temporal: int = 4

    def __post_init__(self):
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise ValueError(
                f"latents_mean/latents_std need z_dim={self.z_dim} entries, got "
                f"{len(self.latents_mean)}/{len(self.latents_std)}"
            )
        if len(self.temperal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(
                f"temperal_downsample needs len(dim_mult)-1={len(self.dim_mult) - 1} flags, got "
                f"{self.temperal_downsample}"
            )

    @property
    def decoder_dim(self) -> int:
        return self.decoder_base_dim or self.base_dim

    @classmethod
    def from_dict(cls, raw: dict, *, source: str = "config") -> WanVAEConfig:
        """Builds the config from a diffusers ``AutoencoderKLWan`` config dict.

        Raises:
            ValueError: for Wan 2.2 variants (``is_residual``, ``patch_size``) or attention scales.
                Absent fields take diffusers' defaults (the Wan 2.1 VAE), as diffusers does.
        """
        if raw.get("is_residual") or raw.get("patch_size") not in (None, 1):
            raise ValueError(
                f"{source}: is_residual={raw.get('is_residual')}, patch_size={raw.get('patch_size')} "
                "is the Wan 2.2 VAE; only the Wan 2.1 VAE (is_residual false, no patch_size) is supported"
            )
        if raw.get("attn_scales"):
            raise ValueError(f"{source}: attn_scales={raw['attn_scales']} is not supported; use []")
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in raw.items() if k in fields and v is not None}
        for key in ("dim_mult", "temperal_downsample", "latents_mean", "latents_std"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


def decode_tiling(model_name: str) -> TilingConfig | None:
    """How a model's VAE decodes in the harness: the tiny presets the whole latent in one call
    (their videos are small), Wan models in diffusers' 256 x 256-pixel tiles."""
    return None if model_name in TINY_PRESETS else TilingConfig()


class WanVAE(nnx.Module):
    """The decoding half of ``AutoencoderKLWan`` (``post_quant_conv`` + ``decoder``).

    Args:
        config: VAE config.
        rngs: random init (tiny presets; a checkpoint overwrites every parameter).
        param_dtype: parameter dtype; activations follow it, norms and softmax run in float32.
    """

    def __init__(self, config: WanVAEConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.config = config
        z = config.z_dim
        self.post_quant_conv = CausalConv3d(
            z, z, (1, 1, 1), (0, 0, 0), rngs=rngs, param_dtype=param_dtype
        )
        self.decoder = Decoder3d(
            config.decoder_dim,
            z,
            config.dim_mult,
            config.num_res_blocks,
            tuple(config.temperal_downsample[::-1]),
            config.out_channels,
            rngs=rngs,
            param_dtype=param_dtype,
        )


def unnormalize_latents(config: WanVAEConfig, latents: jax.Array) -> jax.Array:
    """``latents · std + mean`` per channel (the Wan pipeline's step before ``vae.decode``).

    Args:
        latents: ``[B, z_dim, F, H, W]`` in the transformer's (normalised) space.

    Returns:
        ``[B, z_dim, F, H, W]`` float32 in the VAE's latent space.
    """
    mean = jnp.asarray(config.latents_mean, jnp.float32).reshape(1, -1, 1, 1, 1)
    std = jnp.asarray(config.latents_std, jnp.float32).reshape(1, -1, 1, 1, 1)
    return latents.astype(jnp.float32) * std + mean


def decode_unclipped(vae: WanVAE, z: jax.Array) -> jax.Array:
    """Decodes VAE-space latents without clipping (compiled once per latent shape; differentiable,
    so training backpropagates through it).

    The weights go in as a split state and only the video comes out (``nnx.jit`` would also return
    a copy of every weight).

    Args:
        z: ``[B, F, h, w, z_dim]`` channels-last VAE-space latents.

    Returns:
        ``[B, 1 + 4(F-1), 8h, 8w, 3]`` float32, unclipped.
    """
    graphdef, state = nnx.split(vae)
    return _decode_split(graphdef, state, z)


@partial(jax.jit, static_argnums=0)
def _decode_split(graphdef, state, z: jax.Array) -> jax.Array:
    return _decode_video(nnx.merge(graphdef, state), z)


def _decode_video(vae: WanVAE, z: jax.Array) -> jax.Array:
    """The traced decode: ``[B, F, h, w, z_dim]`` VAE-space latents → ``[B, 1 + 4(F-1), 8h, 8w, 3]``
    float32, unclipped (the body of :func:`decode_unclipped`, also run on every tile window)."""
    dtype = vae.decoder.conv_in.weight.dtype
    x = vae.post_quant_conv(z.astype(dtype))
    first, caches = vae.decoder(x[:, :1], None, True)
    if x.shape[1] == 1:
        return first.astype(jnp.float32)

    def step(carry, chunk):
        out, new = vae.decoder(chunk[:, None], carry, False)
        return new, out

    _, rest = jax.lax.scan(step, caches, jnp.moveaxis(x[:, 1:], 1, 0))
    rest = jnp.moveaxis(rest, 0, 1)  # [B, F-1, 4, H, W, 3]
    rest = rest.reshape(rest.shape[0], -1, *rest.shape[3:])
    return jnp.concatenate([first, rest], axis=1).astype(jnp.float32)


def _validate_latents(config: WanVAEConfig, latents) -> None:
    if latents.ndim != 5 or latents.shape[1] != config.z_dim:
        raise ValueError(
            f"latents shape {tuple(latents.shape)}: expected [B, {config.z_dim}, F, H, W] "
            f"(z_dim={config.z_dim} channels)"
        )


def _is_tiled(config: WanVAEConfig, latents, tiling: TilingConfig | None) -> bool:
    """Whether ``[B, z_dim, F, h, w]`` latents decode in tiles: only when larger than one tile,
    like the reference."""
    s = config.scale_factor_spatial
    return tiling is not None and (
        latents.shape[3] > tiling.tile_sample_min_height // s
        or latents.shape[4] > tiling.tile_sample_min_width // s
    )


def decode_latents(
    vae: WanVAE, latents: jax.Array, *, tiling: TilingConfig | None = None
) -> np.ndarray | jax.Array:
    """Decodes normalised latents to RGB video in [-1, 1].

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` as the transformer produces them (normalised).
        tiling: ``None`` decodes the whole frame at once; a :class:`TilingConfig` decodes
            overlapping spatial tiles in one compiled program (:func:`decode_tiled`; used only when
            the latent is larger than one tile, like the reference).

    Returns:
        ``[B, T, 8h, 8w, 3]`` float32 in [-1, 1], T = 1 + 4(F-1); a NumPy array when tiled.
    """
    _validate_latents(vae.config, latents)
    if _is_tiled(vae.config, latents, tiling):
        video, _ = decode_tiled(vae, latents, tiling)
        return video
    z = jnp.moveaxis(unnormalize_latents(vae.config, jnp.asarray(latents)), 1, -1)
    return jnp.clip(decode_unclipped(vae, z), -1.0, 1.0)


def decode_tiled(
    vae: WanVAE, latents: jax.Array, tiling: TilingConfig, *, to_uint8: bool = False
) -> tuple[np.ndarray, bool]:
    """Tiled decode of normalised latents in one program, compiled once per latent shape.

    Un-normalisation, every tile through the decoder (:func:`blend_windows`), diffusers' blending,
    the clip and (``to_uint8``) the uint8 conversion run in one ``jax.jit``; only the result leaves
    the device, its channels unfolded on the host. Equal to :func:`decode_tiles_reference` (the
    reference's tile-by-tile decode) up to float rounding where no tile is cut at the edge; at the
    bottom and right edges the windows differ (see :class:`TileWindows`).

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` normalised latents.
        tiling: tile sizes in pixels.
        to_uint8: return uint8 frames (``video_to_uint8`` of the float video, bit for bit).

    Returns:
        ``([B, T, 8h, 8w, 3]`` float32 in [-1, 1] or uint8, whether every value was finite).
    """
    _validate_latents(vae.config, latents)
    h, w = latents.shape[-2:]
    scale = vae.config.scale_factor_spatial
    windows = tile_windows(tiling, h, w, scale)
    weights = tile_blend_weights(tiling, h, w, scale)
    graphdef, state = nnx.split(vae)
    video, finite = _decode_tiled_split(
        graphdef, windows, to_uint8, state, jnp.asarray(latents), weights
    )
    video = np.asarray(video)
    return video.reshape(*video.shape[:3], w * scale, -1), bool(finite)


@partial(jax.jit, static_argnums=(0, 1, 2))
def _decode_tiled_split(graphdef, windows: TileWindows, to_uint8: bool, state, latents, weights):
    vae = nnx.merge(graphdef, state)
    z = jnp.moveaxis(unnormalize_latents(vae.config, latents), 1, -1)
    return blend_windows(partial(_decode_video, vae), z, windows, weights, to_uint8=to_uint8)


def decode_tiles_reference(vae: WanVAE, latents: jax.Array, tiling: TilingConfig) -> np.ndarray:
    """The oracle of :func:`decode_tiled`: diffusers' ``tiled_decode`` as it is, each grid tile
    (cut at the edges) through :func:`decode_unclipped` (one compile per tile shape, up to four),
    moved to the host and blended there by :func:`decode_in_tiles`.

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` normalised latents.
        tiling: tile sizes in pixels.

    Returns:
        ``[B, T, 8h, 8w, 3]`` float32 in [-1, 1].
    """
    _validate_latents(vae.config, latents)
    z = jnp.moveaxis(unnormalize_latents(vae.config, jnp.asarray(latents)), 1, -1)
    video = decode_in_tiles(
        lambda tile: np.array(decode_unclipped(vae, tile)),  # a writable host copy
        z,
        tiling,
        vae.config.scale_factor_spatial,
    )
    return np.clip(video, -1.0, 1.0)


def decode_to_frames(
    vae: WanVAE, latents: jax.Array, *, tiling: TilingConfig | None = None
) -> list[np.ndarray]:
    """Normalised latents → one uint8 RGB video per batch entry.

    Tiled (latents larger than one tile), the frames are made on the device by
    :func:`decode_tiled` and only the uint8 video is copied to the host; untiled, the float video
    goes through :func:`models.frames.video_to_uint8`. Both quantise identically.

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` (normalised, as the transformer produces them).
        tiling: see :func:`decode_latents`.

    Returns:
        ``B`` arrays ``[T, 8h, 8w, 3]`` uint8, T = 1 + 4(F-1).

    Raises:
        ValueError: if the decoded video holds NaN or inf values.
    """
    _validate_latents(vae.config, latents)
    if _is_tiled(vae.config, latents, tiling):
        frames, finite = decode_tiled(vae, latents, tiling, to_uint8=True)
        if not finite:
            raise ValueError("video holds NaN or inf values; the decoder or the latents diverged")
        return list(frames)
    video = np.asarray(decode_latents(vae, latents, tiling=tiling))
    return [video_to_uint8(v) for v in video]


VAE_WEIGHT_STEMS = ("diffusion_pytorch_model", "model")


def load_vae(folder: str | Path, *, param_dtype=jnp.float32) -> WanVAE:
    """Loads the decoder from a diffusers ``vae/`` folder (``config.json`` + safetensors).

    The module is built abstractly (no random weights allocated), then every parameter is read
    tensor by tensor; nothing is returned unless all of them loaded with the right shapes.

    Args:
        folder: the ``vae/`` folder.
        param_dtype: parameter dtype (float32 for parity, bfloat16 to halve the weights).

    Raises:
        WeightsError (a ValueError): missing config/weights, a corrupt file, or names/shapes that do
            not match the config.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise WeightsError(f"VAE folder {folder} does not exist")
    config = WanVAEConfig.from_dict(
        read_json(folder / "config.json"), source=str(folder / "config.json")
    )
    files = find_weight_files(folder, VAE_WEIGHT_STEMS)
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0), param_dtype=param_dtype))
    load_torch_layout(
        vae,
        files,
        dtype=param_dtype,
        ignore=lambda name: name.startswith(("encoder.", "quant_conv.")),
    )
    return vae


def save_vae(vae: WanVAE, folder: str | Path) -> None:
    """Writes ``config.json`` and ``diffusion_pytorch_model.safetensors`` in the diffusers layout.

    Only the decoder half exists here, so the folder loads with :func:`load_vae` (not with
    diffusers, which also wants the encoder).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = dataclasses.asdict(vae.config)
    raw.update(_class_name="AutoencoderKLWan", attn_scales=[], is_residual=False)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    save_torch_layout(vae, folder / "diffusion_pytorch_model.safetensors")


def estimate_tile_memory(
    config: WanVAEConfig,
    tile_latent_hw: tuple[int, int],
    frames: int,
    *,
    bytes_per_element: int = 4,
) -> dict[str, int]:
    """Estimates the device bytes of decoding one tile (see the module docstring).

    Counts the feature caches (``CACHE_FRAMES`` frames of every causal conv with a temporal kernel),
    the two largest live activations of one chunk (input and output of the widest conv, plus its
    padded input), the tile's output video and the weights.

    Args:
        config: VAE config.
        tile_latent_hw: latent tile ``(h, w)``.
        frames: latent frames F.
        bytes_per_element: 4 for float32, 2 for bfloat16.

    Returns:
        ``{"caches", "activations", "output", "weights", "total"}`` in bytes.
    """
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    z = jax.ShapeDtypeStruct((1, 1, *tile_latent_hw, config.z_dim), jnp.float32)

    def chunk(vae, x, first):
        return vae.decoder(x, None, first)

    caches_bytes, act_bytes, out_shape = 0, 0, None
    for first in (True, False):
        out, caches = nnx.eval_shape(partial(chunk, first=first), vae, z)
        caches_bytes = max(caches_bytes, sum(int(np.prod(c.shape)) for c in caches))
        out_shape = out.shape
    # The widest activation is at a cache's resolution with 4 frames in flight; a conv holds its
    # (cache + chunk) input and its output at once.
    biggest_cache = max(int(np.prod(c.shape)) for c in caches)
    act_bytes = biggest_cache // CACHE_FRAMES * (CACHE_FRAMES + 4 + 4)
    out_frames = 1 + config.scale_factor_temporal * (frames - 1)
    output = out_frames * int(np.prod(out_shape[2:]))
    weights = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(vae, nnx.Param)))
    result = {
        "caches": caches_bytes * bytes_per_element,
        "activations": act_bytes * bytes_per_element,
        "output": output * 4,
        "weights": weights * bytes_per_element,
    }
    result["total"] = sum(result.values())
    return result
