"""Building blocks of the Wan 2.1 VAE decoder (Flax NNX), channels-last, torch-layout weights.

Activations are ``[B, T, H, W, C]`` (channels last, what XLA convolutions like); weights keep the
PyTorch shapes and names of diffusers' ``AutoencoderKLWan`` (``conv1.weight`` is ``[O, I, kt, kh, kw]``)
so a checkpoint loads by name with no transposes, and the convolutions say ``OIDHW`` instead.

Causal time convolutions and the feature cache
-----------------------------------------------
The decoder runs one latent frame at a time. A causal 3D convolution with a temporal kernel of 3 needs
the two frames before the current chunk; the reference keeps them in a per-convolution "feature
cache" that starts empty (zero padding) and grows from one to two frames. Here every cache has a
fixed shape ``[B, 2, H, W, C]`` and starts as zeros, which is the same thing as the reference's zero
padding, so the chunk loop can be a ``lax.scan`` with a fixed-shape carry. The new cache is always the
last two frames of ``concat(cache, chunk)``: exactly what the reference stores, including its
"previous cache's last frame + a one-frame chunk" case.

A :class:`CacheCursor` hands the caches out in call order (the reference's ``feat_idx``) and
collects the updated ones.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from models.seeded_init import seeded_normal

CACHE_FRAMES = 2  # frames a temporal kernel of 3 needs from before the current chunk


class CacheCursor:
    """Hands out feature caches in call order and collects their replacements.

    Args:
        caches: the caches from the previous chunk in call order, or ``None`` for the first chunk
            (every cache then starts as zeros).
    """

    def __init__(self, caches: list[jax.Array] | None):
        self._caches = caches
        self._next = 0
        self.updated: list[jax.Array] = []

    def take(self, like: jax.Array) -> jax.Array:
        """Returns the next cache ``[B, 2, H, W, C]`` (zeros on the first chunk, shaped like ``like``)."""
        if self._caches is None:
            b, _, h, w, c = like.shape
            cache = jnp.zeros((b, CACHE_FRAMES, h, w, c), like.dtype)
        else:
            cache = self._caches[self._next]
        self._next += 1
        return cache

    def put(self, cache: jax.Array) -> None:
        """Records the updated cache for the same slot as the last :meth:`take`."""
        self.updated.append(cache)


def silu(x: jax.Array) -> jax.Array:
    """SiLU in float32, rounded once to ``x.dtype``.

    torch's bfloat16 elementwise kernels compute in float32; XLA on CPU would round ``x·σ(x)``'s
    intermediate ops to bfloat16 one by one.
    """
    return jax.nn.silu(x.astype(jnp.float32)).astype(x.dtype)


def _normal_init(rngs: nnx.Rngs, shape: tuple[int, ...], fan_in: int, dtype) -> jax.Array:
    # Seeded random weights for tiny presets; scaled so activations keep unit-ish variance.
    return seeded_normal(rngs, shape, 1.0 / math.sqrt(fan_in), dtype)


class CausalConv3d(nnx.Module):
    """Causal 3D convolution: zero (or cached) frames before, symmetric spatial padding.

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel: ``(kt, kh, kw)``; kt is 1 or 3.
        padding: ``(pt, ph, pw)`` as in the reference (time padding becomes ``2·pt`` frames before).
        rngs: random init for tiny presets.
        param_dtype: parameter dtype.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: tuple[int, int, int],
        padding: tuple[int, int, int],
        *,
        rngs: nnx.Rngs,
        param_dtype=jnp.float32,
    ):
        shape = (out_channels, in_channels, *kernel)
        self.weight = nnx.Param(
            _normal_init(rngs, shape, in_channels * math.prod(kernel), param_dtype)
        )
        self.bias = nnx.Param(jnp.zeros((out_channels,), param_dtype))
        self.time_pad = 2 * padding[0]
        self.spatial_pad = (padding[1], padding[2])

    def conv(self, x: jax.Array) -> jax.Array:
        """Valid convolution in time, padded in space. x: [B, T, H, W, C_in]."""
        ph, pw = self.spatial_pad
        weight = self.weight[...].astype(x.dtype)  # [C_out, C_in, kt, kh, kw]
        c_out, c_in, kt, kh, kw = weight.shape
        b, t, h, w, _ = x.shape
        t_out = t - kt + 1
        # XLA's CPU 3D convolution is about 5x slower than a 2D one here, so the time taps are
        # folded into the channels: one 2D convolution over (B * T_out) frames of kt * C_in.
        taps = jnp.concatenate([x[:, i : i + t_out] for i in range(kt)], axis=-1)
        taps = taps.reshape(b * t_out, h, w, kt * c_in)
        kernel = jnp.transpose(weight, (3, 4, 2, 1, 0)).reshape(kh, kw, kt * c_in, c_out)
        y = jax.lax.conv_general_dilated(
            taps,
            kernel,
            window_strides=(1, 1),
            padding=((ph, ph), (pw, pw)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y.reshape(b, t_out, *y.shape[1:]) + self.bias[...].astype(x.dtype)

    def __call__(self, x: jax.Array, cursor: CacheCursor | None = None) -> jax.Array:
        """Applies the convolution to one chunk.

        Args:
            x: ``[B, T, H, W, C_in]``.
            cursor: feature caches; ``None`` means no history (plain zero padding, whole video).

        Returns:
            ``[B, T, H', W', C_out]``.
        """
        if self.time_pad == 0:
            return self.conv(x)
        if cursor is None:
            history = jnp.zeros((x.shape[0], self.time_pad, *x.shape[2:]), x.dtype)
        else:
            history = cursor.take(x)
        full = jnp.concatenate([history, x], axis=1)
        if cursor is not None:
            cursor.put(full[:, -CACHE_FRAMES:])
        return self.conv(full[:, -(self.time_pad + x.shape[1]) :])


class Conv2d(nnx.Module):
    """Per-frame 2D convolution with torch-layout weight ``[O, I, kh, kw]``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        padding: int,
        *,
        rngs: nnx.Rngs,
        param_dtype=jnp.float32,
    ):
        shape = (out_channels, in_channels, kernel, kernel)
        self.weight = nnx.Param(
            _normal_init(rngs, shape, in_channels * kernel * kernel, param_dtype)
        )
        self.bias = nnx.Param(jnp.zeros((out_channels,), param_dtype))
        self.padding = padding

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[N, H, W, C_in]`` → ``[N, H, W, C_out]``."""
        p = self.padding
        y = jax.lax.conv_general_dilated(
            x,
            self.weight[...].astype(x.dtype),
            window_strides=(1, 1),
            padding=((p, p), (p, p)),
            dimension_numbers=("NHWC", "OIHW", "NHWC"),
        )
        return y + self.bias[...].astype(x.dtype)


class ChannelRMSNorm(nnx.Module):
    """``x / ||x||₂ · sqrt(C) · gamma`` over channels (the reference's ``F.normalize`` form).

    ``gamma`` keeps the reference shape: ``(C, 1, 1, 1)`` for video tensors, ``(C, 1, 1)`` for the
    attention block's per-frame images.
    """

    def __init__(self, dim: int, *, images: bool, param_dtype=jnp.float32):
        self.gamma = nnx.Param(jnp.ones((dim, 1, 1) if images else (dim, 1, 1, 1), param_dtype))
        self.scale = math.sqrt(dim)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[..., C]`` → same shape; the norm is taken in float32."""
        x32 = x.astype(jnp.float32)
        norm = jnp.sqrt(jnp.sum(x32 * x32, axis=-1, keepdims=True))
        # F.normalize clamps the norm at 1e-12 so an all-zero vector stays zero.
        y = x32 / jnp.maximum(norm, 1e-12)
        gamma = self.gamma[...].reshape(-1).astype(jnp.float32)
        return (y * self.scale * gamma).astype(x.dtype)


class ResidualBlock(nnx.Module):
    """RMSNorm → SiLU → causal conv, twice, plus a (1×1×1 conv) shortcut."""

    def __init__(self, in_dim: int, out_dim: int, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        self.norm1 = ChannelRMSNorm(in_dim, images=False, param_dtype=param_dtype)
        self.conv1 = CausalConv3d(in_dim, out_dim, (3, 3, 3), (1, 1, 1), **kw)
        self.norm2 = ChannelRMSNorm(out_dim, images=False, param_dtype=param_dtype)
        self.conv2 = CausalConv3d(out_dim, out_dim, (3, 3, 3), (1, 1, 1), **kw)
        self.conv_shortcut = (
            CausalConv3d(in_dim, out_dim, (1, 1, 1), (0, 0, 0), **kw) if in_dim != out_dim else None
        )

    def __call__(self, x: jax.Array, cursor: CacheCursor | None) -> jax.Array:
        """x: ``[B, T, H, W, C_in]`` → ``[B, T, H, W, C_out]``."""
        h = x if self.conv_shortcut is None else self.conv_shortcut(x)
        x = self.conv1(silu(self.norm1(x)), cursor)
        x = self.conv2(silu(self.norm2(x)), cursor)
        return x + h


class AttentionBlock(nnx.Module):
    """Single-head self-attention over the pixels of each frame (no attention across time)."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.norm = ChannelRMSNorm(dim, images=True, param_dtype=param_dtype)
        self.to_qkv = Conv2d(dim, 3 * dim, 1, 0, rngs=rngs, param_dtype=param_dtype)
        self.proj = Conv2d(dim, dim, 1, 0, rngs=rngs, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[B, T, H, W, C]`` → same shape."""
        b, t, h, w, c = x.shape
        frames = x.reshape(b * t, h, w, c)
        qkv = self.to_qkv(self.norm(frames)).reshape(b * t, h * w, 3 * c)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        # Scores accumulate and stay in float32, as the reference's SDPA does.
        scores = jnp.einsum("nqc,nkc->nqk", q, k, preferred_element_type=jnp.float32)
        weights = jax.nn.softmax(scores / math.sqrt(c), axis=-1).astype(v.dtype)
        out = jnp.einsum("nqk,nkc->nqc", weights, v).reshape(b * t, h, w, c)
        return self.proj(out).reshape(b, t, h, w, c) + x


class UpsampleNearest2x(nnx.Module):
    """Nearest ×2 in H and W (``nearest-exact`` at an integer scale is plain pixel repetition)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[N, H, W, C]`` → ``[N, 2H, 2W, C]``."""
        return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class Resample(nnx.Module):
    """Spatial ×2 upsampling (``upsample2d``), optionally preceded by temporal ×2 (``upsample3d``).

    ``resample`` is a two-entry list so the conv's name is ``resample.1`` as in the reference's
    ``nn.Sequential(upsample, conv)``.
    """

    def __init__(
        self, dim: int, mode: str, out_dim: int, *, rngs: nnx.Rngs, param_dtype=jnp.float32
    ):
        if mode not in ("upsample2d", "upsample3d"):
            raise ValueError(
                f"Resample mode {mode!r} is not supported; use upsample2d or upsample3d"
            )
        self.mode = mode
        self.resample = nnx.List(
            [UpsampleNearest2x(), Conv2d(dim, out_dim, 3, 1, rngs=rngs, param_dtype=param_dtype)]
        )
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(
                dim, 2 * dim, (3, 1, 1), (1, 0, 0), rngs=rngs, param_dtype=param_dtype
            )

    def __call__(self, x: jax.Array, cursor: CacheCursor | None, first_chunk: bool) -> jax.Array:
        """x: ``[B, T, H, W, C]`` → ``[B, T', 2H, 2W, C_out]`` with T' = 2T for upsample3d chunks.

        On the first chunk the reference skips the time convolution (the first latent frame decodes
        to a single frame) and leaves the cache empty, i.e. zeros.
        """
        if self.mode == "upsample3d":
            if first_chunk:
                if cursor is not None:
                    cursor.take(x)
                    b, _, h, w, c = x.shape
                    cursor.put(jnp.zeros((b, CACHE_FRAMES, h, w, c), x.dtype))
            else:
                y = self.time_conv(x, cursor)  # [B, T, H, W, 2C]: channel halves are time phases
                b, t, h, w, c2 = y.shape
                y = y.reshape(b, t, h, w, 2, c2 // 2).transpose(0, 1, 4, 2, 3, 5)
                x = y.reshape(b, 2 * t, h, w, c2 // 2)
        b, t, h, w, c = x.shape
        frames = x.reshape(b * t, h, w, c)
        for layer in self.resample:
            frames = layer(frames)
        return frames.reshape(b, t, *frames.shape[1:])


class MidBlock(nnx.Module):
    """Residual block, attention, residual block at the lowest resolution."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        self.attentions = nnx.List([AttentionBlock(dim, **kw)])
        self.resnets = nnx.List([ResidualBlock(dim, dim, **kw), ResidualBlock(dim, dim, **kw)])

    def __call__(self, x: jax.Array, cursor: CacheCursor | None) -> jax.Array:
        """x: ``[B, T, H, W, C]`` → same shape."""
        x = self.resnets[0](x, cursor)
        for attention, resnet in zip(self.attentions, list(self.resnets)[1:], strict=True):
            x = resnet(attention(x), cursor)
        return x


class UpBlock(nnx.Module):
    """``num_res_blocks + 1`` residual blocks, then an optional upsampler."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        num_res_blocks: int,
        upsample_mode: str | None,
        *,
        rngs: nnx.Rngs,
        param_dtype=jnp.float32,
    ):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        dims = [in_dim] + [out_dim] * (num_res_blocks + 1)
        self.resnets = nnx.List(
            [ResidualBlock(a, b, **kw) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        )
        self.upsamplers = (
            nnx.List([Resample(out_dim, upsample_mode, out_dim // 2, **kw)])
            if upsample_mode is not None
            else None
        )

    def __call__(self, x: jax.Array, cursor: CacheCursor | None, first_chunk: bool) -> jax.Array:
        """x: ``[B, T, H, W, C_in]`` → ``[B, T', H', W', C_out']``."""
        for resnet in self.resnets:
            x = resnet(x, cursor)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x, cursor, first_chunk)
        return x


class Decoder3d(nnx.Module):
    """The Wan 2.1 video decoder: latent ``z_dim`` channels → RGB, ×8 in space, ×4 in time.

    Args:
        dim: decoder base channel count (96 for the real VAE).
        z_dim: latent channels (16).
        dim_mult: channel multipliers, e.g. ``(1, 2, 4, 4)``.
        num_res_blocks: residual blocks per level (the decoder uses one more).
        temperal_upsample: per up-block temporal ×2 flags (the reverse of the encoder's downsample).
        out_channels: 3 (RGB).
        rngs: random init for tiny presets.
        param_dtype: parameter dtype.
    """

    def __init__(
        self,
        dim: int,
        z_dim: int,
        dim_mult: tuple[int, ...],
        num_res_blocks: int,
        temperal_upsample: tuple[bool, ...],
        out_channels: int,
        *,
        rngs: nnx.Rngs,
        param_dtype=jnp.float32,
    ):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        dims = [dim * m for m in (dim_mult[-1], *dim_mult[::-1])]
        self.conv_in = CausalConv3d(z_dim, dims[0], (3, 3, 3), (1, 1, 1), **kw)
        self.mid_block = MidBlock(dims[0], **kw)
        blocks = []
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            if i > 0:
                in_dim //= 2  # the previous upsampler halved the channels (Wan 2.1 layout)
            mode = None
            if i != len(dim_mult) - 1:
                mode = "upsample3d" if temperal_upsample[i] else "upsample2d"
            blocks.append(UpBlock(in_dim, out_dim, num_res_blocks, mode, **kw))
        self.up_blocks = nnx.List(blocks)
        self.norm_out = ChannelRMSNorm(dims[-1], images=False, param_dtype=param_dtype)
        self.conv_out = CausalConv3d(dims[-1], out_channels, (3, 3, 3), (1, 1, 1), **kw)

    def __call__(
        self, x: jax.Array, caches: list[jax.Array] | None, first_chunk: bool
    ) -> tuple[jax.Array, list[jax.Array]]:
        """Decodes one latent chunk.

        Args:
            x: ``[B, 1, h, w, z_dim]`` (after ``post_quant_conv``).
            caches: feature caches from the previous chunk, or ``None`` on the first chunk.
            first_chunk: the first latent frame decodes to 1 frame, the others to 4.

        Returns:
            ``([B, T, 8h, 8w, 3], caches)`` with T = 1 on the first chunk else 4, unclipped.
        """
        cursor = CacheCursor(caches)
        x = self.conv_in(x, cursor)
        x = self.mid_block(x, cursor)
        for block in self.up_blocks:
            x = block(x, cursor, first_chunk)
        x = self.conv_out(silu(self.norm_out(x)), cursor)
        return x, cursor.updated
