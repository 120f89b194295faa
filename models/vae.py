"""Wan 2.1 VAE decoder in Flax NNX: normalised latents → RGB video in [-1, 1], optionally tiled.

Faithful to diffusers' ``AutoencoderKLWan.decode`` (checked to 1e-4 in float32 by the parity tests):
``post_quant_conv``, then the decoder one latent frame at a time with feature caches (see
``models/vae_blocks.py``). The chunk loop is a ``lax.scan`` over latent frames 1..F-1 with a
fixed-shape cache carry; frame 0 is a separate call because it decodes to one frame, not four.
Only the decoder is ported (text-to-video never encodes); the encoder's weights are skipped on load.

Memory budget (real VAE: base_dim 96, z_dim 16, dim_mult (1, 2, 4, 4); 1440p × 81 frames)
----------------------------------------------------------------------------------------
Latent 21×180×320. Every causal conv keeps two frames of its input as a cache, and at full
resolution those are large: :func:`estimate_tile_memory` puts an *untiled* 1440p decode at
~32.5 GiB of caches + ~13 GiB of chunk activations + 3.3 GiB of output (~49 GiB): 1440p needs tiling.
With tiling on (the default :class:`TilingConfig`: 256×256-pixel tiles = 32×32 latents, stride 192)
tiles are decoded one at a time and moved to the host, where they are blended into the float32
video (81×1440×2560×3 ×4 B = 3.3 GiB of *host* memory). Per tile on the device:

- estimate (float32, :func:`models.peak_memory.vae_decode_memory`, the model preflight uses):
  caches 0.58 GiB + chunk activations 0.75 GiB + tile output 0.06 GiB + weights 0.27 GiB
  = **1.66 GiB**;
- XLA's figure for the compiled tile program (``memory_analysis()`` on CPU, 21 latent frames):
  1.30 GiB temporaries + 0.27 GiB weights + 0.06 GiB output = **1.64 GiB**,

far inside a 16 GiB activation budget (bfloat16 weights/activations halve it). The 1440p grid is
8 × 14 = 112 tiles in four compiled shapes (32×32 and the edge tiles 32×8, 12×32, 12×8 latents).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
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


@dataclasses.dataclass(frozen=True)
class TilingConfig:
    """Spatial tiling in pixels (diffusers' defaults); tiles overlap by ``min - stride`` pixels,
    blended linearly (top tile → bottom tile, left → right), as the reference does."""

    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_sample_stride_height: int = 192
    tile_sample_stride_width: int = 192

    def __post_init__(self):
        for name in ("height", "width"):
            size = getattr(self, f"tile_sample_min_{name}")
            stride = getattr(self, f"tile_sample_stride_{name}")
            if size % 8 or stride % 8 or not 0 < stride <= size:
                raise ValueError(
                    f"tile_sample_min_{name}={size}, tile_sample_stride_{name}={stride}: both must be "
                    "positive multiples of 8 with stride <= size (e.g. 256 and 192)"
                )

    def latent_grid(self, h: int, w: int, scale: int) -> list[list[tuple[int, int]]]:
        """``[rows, cols]``: the ``(start, length)`` of each tile along each axis of ``h x w`` latent
        pixels at spatial compression ``scale``; a tile every stride, the last ones cut at the edge."""
        axes = (
            (h, self.tile_sample_min_height, self.tile_sample_stride_height),
            (w, self.tile_sample_min_width, self.tile_sample_stride_width),
        )
        return [
            [
                (start, min(size // scale, extent - start))
                for start in range(0, extent, stride // scale)
            ]
            for extent, size, stride in axes
        ]


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
    vae = nnx.merge(graphdef, state)
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


def decode_latents(
    vae: WanVAE, latents: jax.Array, *, tiling: TilingConfig | None = None
) -> np.ndarray | jax.Array:
    """Decodes normalised latents to RGB video in [-1, 1].

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` as the transformer produces them (normalised).
        tiling: ``None`` decodes the whole frame at once on the device; a :class:`TilingConfig`
            decodes overlapping spatial tiles one at a time (used only when the latent is larger than
            one tile, like the reference) and blends them on the host.

    Returns:
        ``[B, T, 8h, 8w, 3]`` float32 in [-1, 1], T = 1 + 4(F-1); a NumPy array when tiled.
    """
    _validate_latents(vae.config, latents)
    z = jnp.moveaxis(unnormalize_latents(vae.config, jnp.asarray(latents)), 1, -1)
    s = vae.config.scale_factor_spatial
    if tiling is not None and (
        z.shape[2] > tiling.tile_sample_min_height // s
        or z.shape[3] > tiling.tile_sample_min_width // s
    ):
        return np.clip(_decode_tiled(vae, z, tiling), -1.0, 1.0)
    return jnp.clip(decode_unclipped(vae, z), -1.0, 1.0)


def _blend_weights(extent: int) -> np.ndarray:
    # Weight of the later tile at offset y of the overlap: y / extent (the reference's ramp).
    return np.arange(extent, dtype=np.float32) / extent


def _decode_tiled(vae: WanVAE, z: jax.Array, tiling: TilingConfig) -> np.ndarray:
    """Tiled decode: each tile through :func:`decode_unclipped`, moved to the host, then blended."""
    return decode_in_tiles(
        lambda tile: np.array(decode_unclipped(vae, tile)),  # a writable host copy
        z,
        tiling,
        vae.config.scale_factor_spatial,
    )


def decode_in_tiles(
    decode_tile: Callable[[jax.Array], np.ndarray],
    z: jax.Array,
    tiling: TilingConfig,
    scale: int,
) -> np.ndarray:
    """The reference's tile grid and linear blending around any per-tile decoder.

    Tiles start every ``stride // scale`` latent pixels and span ``min // scale``; each decoded tile
    is blended in place with the (already blended) tile above and to its left over ``min - stride``
    pixels, then cropped to ``stride`` pixels, exactly as diffusers' ``tiled_decode``.

    Args:
        decode_tile: ``[B, F, th, tw, C]`` latent tile → ``[B, T, scale·th, scale·tw, 3]`` writable
            NumPy array.
        z: ``[B, F, h, w, C]`` channels-last latents.
        tiling: tile sizes in pixels.
        scale: spatial compression (8).

    Returns:
        ``[B, T, scale·h, scale·w, 3]`` float32.
    """
    _, _, h, w, _ = z.shape
    row_spans, col_spans = tiling.latent_grid(h, w, scale)
    stride_h, stride_w = tiling.tile_sample_stride_height, tiling.tile_sample_stride_width
    blend_h = tiling.tile_sample_min_height - stride_h
    blend_w = tiling.tile_sample_min_width - stride_w
    rows = [
        [decode_tile(z[:, :, i : i + m, j : j + n]) for j, n in col_spans] for i, m in row_spans
    ]
    out_rows = []
    for i, row in enumerate(rows):
        pieces = []
        for j, tile in enumerate(row):
            # Blended in place, as the reference does: the next tile blends with this blended one.
            if i > 0:
                above = rows[i - 1][j]
                ext = min(above.shape[2], tile.shape[2], blend_h)
                r = _blend_weights(ext)[:, None, None]
                tile[:, :, :ext] = above[:, :, -ext:] * (1 - r) + tile[:, :, :ext] * r
            if j > 0:
                left = row[j - 1]
                ext = min(left.shape[3], tile.shape[3], blend_w)
                r = _blend_weights(ext)[None, :, None]
                tile[:, :, :, :ext] = left[:, :, :, -ext:] * (1 - r) + tile[:, :, :, :ext] * r
            pieces.append(tile[:, :, :stride_h, :stride_w])
        out_rows.append(np.concatenate(pieces, axis=3))
    return np.concatenate(out_rows, axis=2)[:, :, : h * scale, : w * scale]


def decode_to_frames(
    vae: WanVAE, latents: jax.Array, *, tiling: TilingConfig | None = None
) -> list[np.ndarray]:
    """Normalised latents → one uint8 RGB video per batch entry.

    Args:
        vae: the decoder.
        latents: ``[B, z_dim, F, h, w]`` (normalised, as the transformer produces them).
        tiling: see :func:`decode_latents`.

    Returns:
        ``B`` arrays ``[T, 8h, 8w, 3]`` uint8, T = 1 + 4(F-1).
    """
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
