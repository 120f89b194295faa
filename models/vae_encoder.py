"""The encoding half of the Wan 2.1 VAE, for training the tiny VAE as an autoencoder.

The harness only decodes (``models.vae``); training needs the encoder too. Names and shapes follow
diffusers' ``AutoencoderKLWan`` (``encoder.*``, ``quant_conv.*``), so the saved ``vae/`` folder is
a complete Wan VAE whose decoder ``models.vae.load_vae`` reads (it skips the encoder's weights).

Diffusers encodes one chunk at a time (the first frame, then 4 frames per chunk) with feature
caches; every cache holds the frames a causal convolution needs from before its chunk, so the
chunked result equals one pass over the whole clip with zero padding before the first frame. This
module runs that single pass: a causal convolution pads with zeros, and a temporal ×2 downsampler
keeps the first frame and applies its stride-2 convolution over the whole clip (diffusers' chunks
see exactly the windows ``(0, 1, 2), (2, 3, 4), ...``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from models.safetensors_reader import find_weight_files, load_torch_layout, read_json
from models.vae import VAE_WEIGHT_STEMS, WanVAE, WanVAEConfig
from models.vae_blocks import (
    CausalConv3d,
    ChannelRMSNorm,
    MidBlock,
    Resample,
    ResidualBlock,
    _normal_init,
    silu,
)


class ZeroPadRightBottom(nnx.Module):
    """``nn.ZeroPad2d((0, 1, 0, 1))``: the padding before a stride-2 convolution (no weights)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[N, H, W, C]`` → ``[N, H + 1, W + 1, C]``."""
        return jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))


class StridedConv2d(nnx.Module):
    """Per-frame 3×3 convolution with stride 2, no padding of its own (``nn.Conv2d(dim, dim, 3,
    stride=2)``)."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.weight = nnx.Param(_normal_init(rngs, (dim, dim, 3, 3), dim * 9, param_dtype))
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[N, H, W, C]`` → ``[N, H/2, W/2, C]``."""
        y = jax.lax.conv_general_dilated(
            x,
            self.weight[...].astype(x.dtype),
            window_strides=(2, 2),
            padding="VALID",
            dimension_numbers=("NHWC", "OIHW", "NHWC"),
        )
        return y + self.bias[...].astype(x.dtype)


class Downsample(nnx.Module):
    """Spatial ×2 downsampling (``downsample2d``), then optionally temporal ×2 (``downsample3d``).

    ``resample`` is a two-entry list so the conv is named ``resample.1`` as in the reference.
    """

    def __init__(self, dim: int, temporal: bool, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.resample = nnx.List(
            [ZeroPadRightBottom(), StridedConv2d(dim, rngs=rngs, param_dtype=param_dtype)]
        )
        self.time_conv = (
            CausalConv3d(dim, dim, (3, 1, 1), (0, 0, 0), rngs=rngs, param_dtype=param_dtype)
            if temporal
            else None
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[B, T, H, W, C]`` → ``[B, T', H/2, W/2, C]``, T' = 1 + (T - 1) / 2 if temporal."""
        b, t, h, w, c = x.shape
        frames = x.reshape(b * t, h, w, c)
        for layer in self.resample:
            frames = layer(frames)
        x = frames
        x = x.reshape(b, t, *x.shape[1:])
        if self.time_conv is None or t == 1:
            return x
        strided = self.time_conv(x)[:, ::2]  # valid convolution, windows (0,1,2), (2,3,4), ...
        return jnp.concatenate([x[:, :1], strided], axis=1)


class Encoder3d(nnx.Module):
    """The Wan 2.1 video encoder: RGB → ``2 · z_dim`` channels (mean and log-variance)."""

    def __init__(self, config: WanVAEConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        dims = [config.base_dim * m for m in (1, *config.dim_mult)]
        self.conv_in = CausalConv3d(3, dims[0], (3, 3, 3), (1, 1, 1), **kw)
        blocks: list[nnx.Module] = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            for _ in range(config.num_res_blocks):
                blocks.append(ResidualBlock(in_dim, out_dim, **kw))
                in_dim = out_dim
            if i != len(config.dim_mult) - 1:
                blocks.append(Downsample(out_dim, config.temperal_downsample[i], **kw))
        self.down_blocks = nnx.List(blocks)
        self.mid_block = MidBlock(dims[-1], **kw)
        self.norm_out = ChannelRMSNorm(dims[-1], images=False, param_dtype=param_dtype)
        self.conv_out = CausalConv3d(dims[-1], 2 * config.z_dim, (3, 3, 3), (1, 1, 1), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[B, T, H, W, 3]`` in [-1, 1] → ``[B, 1 + (T-1)/4, H/8, W/8, 2 z_dim]``."""
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x) if isinstance(block, Downsample) else block(x, None)
        x = self.mid_block(x, None)
        return self.conv_out(silu(self.norm_out(x)))


class WanAutoencoder(nnx.Module):
    """Encoder and decoder of ``AutoencoderKLWan``, under diffusers' parameter names.

    Args:
        config: the VAE's config (its ``latents_mean`` / ``latents_std`` normalise the latents
            the transformer sees).
        rngs: random init.
        param_dtype: parameter dtype.
    """

    def __init__(self, config: WanVAEConfig, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.config = config
        z2 = 2 * config.z_dim
        self.encoder = Encoder3d(config, rngs=rngs, param_dtype=param_dtype)
        self.quant_conv = CausalConv3d(
            z2, z2, (1, 1, 1), (0, 0, 0), rngs=rngs, param_dtype=param_dtype
        )
        self.decoding = WanVAE(config, rngs=rngs, param_dtype=param_dtype)

    def moments(self, video: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Posterior mean and log-variance, each ``[B, F, h, w, z_dim]`` (VAE space)."""
        moments = self.quant_conv(self.encoder(video))
        mean, logvar = jnp.split(moments, 2, axis=-1)
        return mean, jnp.clip(logvar, -30.0, 20.0)

    def decode(self, z: jax.Array) -> jax.Array:
        """VAE-space latents ``[B, F, h, w, z_dim]`` → video ``[B, T, H, W, 3]``, unclipped
        (:func:`decode_whole_clip`: the harness's chunked decode in one pass)."""
        return decode_whole_clip(self.decoding, z)


def _upsample_whole_clip(resample: Resample, x: jax.Array) -> jax.Array:
    """A decoder upsampler over the whole clip. The chunked decode skips the time convolution on
    the first latent frame and starts its cache as zeros at the second, so frame 0 passes
    unchanged and the causal time convolution runs over frames 1.. with zero history."""
    if resample.mode == "upsample3d" and x.shape[1] > 1:
        y = resample.time_conv(x[:, 1:])  # [B, T-1, H, W, 2C]: channel halves are time phases
        b, t, h, w, c2 = y.shape
        y = y.reshape(b, t, h, w, 2, c2 // 2).transpose(0, 1, 4, 2, 3, 5)
        x = jnp.concatenate([x[:, :1], y.reshape(b, 2 * t, h, w, c2 // 2)], axis=1)
    b, t, h, w, c = x.shape
    frames = x.reshape(b * t, h, w, c)
    for layer in resample.resample:
        frames = layer(frames)
    return frames.reshape(b, t, *frames.shape[1:])


def decode_whole_clip(vae: WanVAE, z: jax.Array) -> jax.Array:
    """The decoder in one pass over all latent frames (no scan over chunks): the same video as
    ``models.vae.decode_unclipped``, in a program that differentiates and compiles much faster.

    Args:
        vae: the decoder.
        z: ``[B, F, h, w, z_dim]`` VAE-space latents.

    Returns:
        ``[B, 1 + 4(F-1), 8h, 8w, 3]``, unclipped, in the parameters' dtype.
    """
    decoder = vae.decoder
    x = vae.post_quant_conv(z.astype(decoder.conv_in.weight.dtype))
    x = decoder.mid_block(decoder.conv_in(x), None)
    for block in decoder.up_blocks:
        for resnet in block.resnets:
            x = resnet(x, None)
        if block.upsamplers is not None:
            x = _upsample_whole_clip(block.upsamplers[0], x)
    return decoder.conv_out(silu(decoder.norm_out(x)))


def normalise(config: WanVAEConfig, z: jax.Array) -> jax.Array:
    """VAE-space ``[B, F, h, w, C]`` → the transformer's ``[B, C, F, h, w]``: ``(z - mean) / std``."""
    mean = jnp.asarray(config.latents_mean, jnp.float32)
    std = jnp.asarray(config.latents_std, jnp.float32)
    return jnp.moveaxis((z.astype(jnp.float32) - mean) / std, -1, 1)


def with_latent_statistics(
    autoencoder: WanAutoencoder, mean: tuple[float, ...], std: tuple[float, ...]
) -> WanAutoencoder:
    """The same weights under a config whose ``latents_mean`` / ``latents_std`` are replaced."""
    config = dataclasses.replace(
        autoencoder.config,
        latents_mean=tuple(float(m) for m in mean),
        latents_std=tuple(float(s) for s in std),
    )
    _, state = nnx.split(autoencoder)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: WanAutoencoder(config, rngs=nnx.Rngs(0))))
    return nnx.merge(graphdef, state)


def save_autoencoder(autoencoder: WanAutoencoder, folder: str | Path, dtype=None) -> None:
    """Writes ``config.json`` and ``diffusion_pytorch_model.safetensors`` (encoder and decoder)
    in diffusers' ``AutoencoderKLWan`` layout.

    Args:
        autoencoder: the trained VAE.
        folder: the ``vae/`` folder.
        dtype: storage dtype (e.g. ``jnp.float16``); None keeps the parameters' own.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = dataclasses.asdict(autoencoder.config)
    raw.update(_class_name="AutoencoderKLWan", attn_scales=[], is_residual=False)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    # The decoder's parameters sit at the top level in diffusers (post_quant_conv, decoder).
    flat = {
        ".".join(str(p) for p in path if p != "decoding"): value
        for path, value in nnx.to_flat_state(nnx.state(autoencoder, nnx.Param))
    }
    save_torch_layout_flat(flat, folder / "diffusion_pytorch_model.safetensors", dtype)


def load_autoencoder(folder: str | Path, *, param_dtype=jnp.float32) -> WanAutoencoder:
    """Reads what :func:`save_autoencoder` wrote: encoder, decoder and latent statistics.

    Raises:
        WeightsError (a ValueError): a missing folder or file, or names or shapes that do not
            match the config (every parameter is checked before any is replaced).
    """
    folder = Path(folder)
    config = WanVAEConfig.from_dict(
        read_json(folder / "config.json"), source=str(folder / "config.json")
    )
    model = nnx.eval_shape(
        lambda: WanAutoencoder(config, rngs=nnx.Rngs(0), param_dtype=param_dtype)
    )
    names = [
        ".".join(str(p) for p in path)
        for path, node in nnx.iter_graph(model)
        if isinstance(node, nnx.Param)
    ]
    # The decoder's parameters are stored at the top level, as diffusers names them.
    aliases = {n: (n.removeprefix("decoding."),) for n in names if n.startswith("decoding.")}
    files = find_weight_files(folder, VAE_WEIGHT_STEMS)
    load_torch_layout(model, files, dtype=param_dtype, aliases=aliases)
    return model


def save_torch_layout_flat(flat: dict, path: Path, dtype=None) -> None:
    """Writes ``{dotted name: nnx.Param}`` to a safetensors file, optionally cast to ``dtype``."""

    tensors = {}
    for name, variable in flat.items():
        value = jnp.asarray(variable.get_value() if hasattr(variable, "get_value") else variable)
        tensors[name] = np.ascontiguousarray(value.astype(dtype) if dtype is not None else value)
    save_file(tensors, str(path))


def parameter_count(module: nnx.Module) -> int:
    """Number of scalar parameters."""
    return sum(math.prod(p.shape) for p in jax.tree.leaves(nnx.state(module, nnx.Param)))
