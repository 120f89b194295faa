"""Device-memory estimates for preflight: the UMT5 text encoder and the VAE decode (whole or tiled).

Both are written as *peak = weights + state + max(activations, workspace) + inputs + outputs*:

- ``weights``: the parameters in their dtype (exact, from the config).
- ``state``: buffers that live through the whole program (the VAE's feature caches; exact shapes
  from ``nnx.eval_shape``).
- ``activations``: the largest set of buffers live at once inside one layer or chunk (a counted
  model, stated in each function).
- ``workspace``: what XLA on the *host CPU* adds: it has no bfloat16 matmul/convolution, so it
  converts bfloat16 weights to float32, and it re-lays every conv kernel (``CausalConv3d.conv``'s
  transpose) into a copy. Measured with ``jax.jit(...).lower(...).compile().memory_analysis()``,
  these copies are scheduled early and overlap the activations (temp ≈ max of the two), hence the
  ``max``. Accelerators multiply bfloat16 natively, so ``workspace`` is 0 unless ``host_cpu``.
- ``inputs`` / ``outputs``: the program's arguments other than weights, and its results.

Checked against XLA's own figure (CPU, float32, tests/models/test_peak_memory.py) within 25%.

UMT5-XXL (Wan 2.1) at L=512, one prompt: 5.68e9 parameters = 10.6 GiB in bfloat16 and ~0.15 GiB
of activations. On the host CPU in bfloat16 the float32 conversion of the 24 layers adds 17.3 GiB
(~28 GiB in all), more than float32 weights need (21.2 GiB): on CPU, load it in float32.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.text_encoder import UMT5Config
from models.vae import WanVAE, WanVAEConfig
from models.vae_tiling import TilingConfig, tile_windows

F32 = 4
# Live buffers at the widest conv of the VAE's last level, in units of one full-resolution feature
# map of the chunk: the block input kept for the residual (1), norm + SiLU output (1),
# cache ⊕ chunk (6 of 4 frames: 1.5), the three time taps side by side (3), the conv output (1);
# 7.5, rounded up for the norm's float32 temporaries (XLA on CPU measured 8.3-8.4).
VAE_CHUNK_ACTIVATION_MAPS = 8


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one compiled program (see the module docstring for each field)."""

    weights: int
    state: int
    activations: int
    workspace: int
    inputs: int
    outputs: int

    @property
    def peak(self) -> int:
        """``weights + state + max(activations, workspace) + inputs + outputs``."""
        transient = max(self.activations, self.workspace)
        return self.weights + self.state + transient + self.inputs + self.outputs

    def as_dict(self) -> dict[str, int]:
        """Every field and ``peak``."""
        return {**dataclasses.asdict(self), "peak": self.peak}


def umt5_parameter_count(config: UMT5Config) -> tuple[int, int]:
    """``(embedding, layers)`` parameter counts; layers include the norms and bias tables."""
    inner = config.num_heads * config.d_kv
    ffn_in = 2 if config.is_gated_act else 1
    per_layer = (
        4 * config.d_model * inner  # q, k, v, o
        + config.relative_attention_num_buckets * config.num_heads  # UMT5: a table per layer
        + (ffn_in + 1) * config.d_model * config.d_ff  # wi_0, wi_1, wo
        + 2 * config.d_model  # two RMSNorm weights
    )
    return config.vocab_size * config.d_model, config.num_layers * per_layer + config.d_model


def umt5_memory(
    config: UMT5Config, param_dtype, max_length: int, batch: int, *, host_cpu: bool = False
) -> MemoryEstimate:
    """Memory of one :func:`models.text_encoder.run_encoder` call.

    Activations: the larger of one layer's attention stage and its feed-forward stage, plus the
    residual stream. Attention: the float32 scores and probabilities ``2·B·H·L²·4`` and
    q, k, v, attention output ``4·B·L·H·d_kv·s``. Feed-forward: ``wi_0``/``wi_1`` outputs and the
    float32 gated product, ``B·L·d_ff·(2s + 4)``. Residual stream: block input and output,
    ``2·B·L·d_model·s`` (``s`` the bytes of ``param_dtype``, also the compute dtype).

    Args:
        config: encoder config.
        param_dtype: weights (and compute) dtype.
        max_length: L.
        batch: B prompts encoded together.
        host_cpu: add the float32 copy of bfloat16 layer weights XLA on CPU makes.

    Returns:
        The estimate; ``.peak`` is the number preflight compares with the device.
    """
    s = jnp.dtype(param_dtype).itemsize
    embedding, layers = umt5_parameter_count(config)
    b, length, heads = batch, max_length, config.num_heads
    attention = 2 * b * heads * length**2 * F32 + 4 * b * length * heads * config.d_kv * s
    ffn = b * length * config.d_ff * (2 * s + F32)
    residual = 2 * b * length * config.d_model * s
    return MemoryEstimate(
        weights=(embedding + layers) * s,
        state=0,
        activations=max(attention, ffn) + residual,
        workspace=layers * F32 if host_cpu and s != F32 else 0,
        inputs=2 * b * length * 4,  # int32 ids and mask
        outputs=b * length * config.d_model * s,
    )


def umt5_peak_bytes(
    config: UMT5Config, param_dtype, max_length: int, batch: int, *, host_cpu: bool = False
) -> int:
    """Peak device bytes of encoding ``batch`` prompts of ``max_length`` tokens (see
    :func:`umt5_memory` for the model)."""
    return umt5_memory(config, param_dtype, max_length, batch, host_cpu=host_cpu).peak


def vae_parameter_count(config: WanVAEConfig) -> int:
    """Parameters of the VAE's decoding half (``post_quant_conv`` + decoder), from abstract
    weights."""
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(vae, nnx.Param)))


def _vae_shapes(config: WanVAEConfig, latent_hw: tuple[int, int], batch: int, param_dtype):
    """Parameter count, feature-cache elements and the final level's channel count."""
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0), param_dtype=param_dtype))
    params = vae_parameter_count(config)
    x = jax.ShapeDtypeStruct((batch, 1, *latent_hw, config.z_dim), param_dtype)
    _, caches = nnx.eval_shape(lambda v, x: v.decoder(x, None, True), vae, x)
    cache_elements = sum(int(np.prod(c.shape)) for c in caches)
    return params, cache_elements, config.decoder_dim * config.dim_mult[0]


def vae_chunk_memory(
    config: WanVAEConfig,
    latent_hw: tuple[int, int],
    *,
    batch: int = 1,
    param_dtype=jnp.float32,
    host_cpu: bool = False,
) -> MemoryEstimate:
    """Memory of decoding one latent frame (a chunk) as a standalone program.

    The caches come in and their replacements go out (``state`` = 2 × caches); the output is the
    chunk's 4 frames. Activations: ``VAE_CHUNK_ACTIVATION_MAPS`` feature maps of the last level,
    ``B · 4 · 8h · 8w · C_last · s`` each (see the constant).

    Args:
        config: VAE config.
        latent_hw: latent ``(h, w)`` of the tile (or of the whole frame when untiled).
        batch: B.
        param_dtype: weights (and compute) dtype.
        host_cpu: count XLA-on-CPU's float32 kernel copies and float32 convolution buffers.
    """
    s = jnp.dtype(param_dtype).itemsize
    params, cache_elements, c_last = _vae_shapes(config, latent_hw, batch, param_dtype)
    scale, t = config.scale_factor_spatial, config.scale_factor_temporal
    pixels = math.prod(latent_hw) * scale**2
    act_bytes = F32 if host_cpu else s  # CPU convolutions run in float32
    return MemoryEstimate(
        weights=params * s,
        state=2 * cache_elements * s,
        activations=VAE_CHUNK_ACTIVATION_MAPS * batch * t * pixels * c_last * act_bytes,
        workspace=params * F32 if host_cpu else 0,
        inputs=batch * math.prod(latent_hw) * config.z_dim * s,
        outputs=batch * t * pixels * config.out_channels * s,
    )


def vae_decode_memory(
    config: WanVAEConfig,
    latent_hw: tuple[int, int],
    frames: int,
    *,
    batch: int = 1,
    param_dtype=jnp.float32,
    host_cpu: bool = False,
) -> MemoryEstimate:
    """Memory of one whole decode (``models.vae.decode_unclipped``: all frames of one tile), the
    untiled decode's program and the per-window part of the tiled one
    (:func:`vae_tiled_decode_memory`).

    The chunk loop is a ``lax.scan`` whose cache carry is updated in place, so ``state`` is one set
    of caches; activations and workspace are one chunk's (:func:`vae_chunk_memory`); the output is
    the float32 video ``B · (1 + 4(F-1)) · 8h · 8w · 3 · 4``.

    Args:
        config: VAE config.
        latent_hw: latent ``(h, w)`` of one tile (``TilingConfig().tile_sample_min_height // 8``
            each way when tiled) or of the whole frame.
        frames: latent frames F.
        batch: B.
        param_dtype: weights (and compute) dtype.
        host_cpu: see :func:`vae_chunk_memory`.
    """
    chunk = vae_chunk_memory(
        config, latent_hw, batch=batch, param_dtype=param_dtype, host_cpu=host_cpu
    )
    out_frames = 1 + config.scale_factor_temporal * (frames - 1)
    pixels = math.prod(latent_hw) * config.scale_factor_spatial**2
    return dataclasses.replace(
        chunk,
        state=chunk.state // 2,
        inputs=batch * frames * math.prod(latent_hw) * config.z_dim * F32,
        outputs=batch * out_frames * pixels * config.out_channels * F32,
    )


def vae_decode_peak_bytes(
    config: WanVAEConfig,
    latent_hw: tuple[int, int],
    frames: int,
    *,
    batch: int = 1,
    param_dtype=jnp.float32,
    host_cpu: bool = False,
) -> int:
    """Peak device bytes of decoding one tile (see :func:`vae_decode_memory` for the model)."""
    return vae_decode_memory(
        config, latent_hw, frames, batch=batch, param_dtype=param_dtype, host_cpu=host_cpu
    ).peak


def vae_tiled_decode_memory(
    config: WanVAEConfig,
    latent_hw: tuple[int, int],
    frames: int,
    tiling: TilingConfig,
    *,
    batch: int = 1,
    param_dtype=jnp.float32,
    host_cpu: bool = False,
    to_uint8: bool = True,
) -> MemoryEstimate:
    """Memory of the whole tiled decode, one program (``models.vae.decode_tiled``).

    The windows are decoded one at a time inside the program, so the decoder's part is one
    window's :func:`vae_decode_memory` (its float32 output counted with the activations). Beside it
    the tile loop keeps its float32 row strip ``B · T · Hs · 8w · 3 · 4`` (``Hs`` the larger of a
    window's and a stride's pixel rows) as ``state``, and the outputs are the emitted rows,
    ``B · T · ((window rows - 1) · stride_h + Hs) · 8w · 3``, and the video cut from them,
    ``B · T · 8h · 8w · 3`` (uint8: 1 byte each; 4 with ``to_uint8=False``). Inputs: the whole
    latent and the blend weights. XLA on CPU (real VAE, float32, 81 frames): 2.30 GiB at 720p,
    3.52 GiB at 1440p; this estimate 2.43 and 4.11 GiB (tests/models/test_vae_single_compile.py
    checks it within 25% on the tiny VAE).

    Args:
        config: VAE config.
        latent_hw: latent ``(h, w)`` of the whole frame (larger than one tile).
        frames: latent frames F.
        tiling: the tile grid.
        batch: B.
        param_dtype: weights (and compute) dtype.
        host_cpu: see :func:`vae_chunk_memory`.
        to_uint8: the frames program (the run's); False: the float32 video's.
    """
    scale = config.scale_factor_spatial
    windows = tile_windows(tiling, *latent_hw, scale)
    window = vae_decode_memory(
        config, windows.window_hw, frames, batch=batch, param_dtype=param_dtype, host_cpu=host_cpu
    )
    out_frames = 1 + config.scale_factor_temporal * (frames - 1)
    row_px = batch * out_frames * latent_hw[1] * scale * config.out_channels  # one pixel row
    out_bytes = 1 if to_uint8 else F32
    emitted = (len(windows.row_starts) - 1) * windows.stride_px[0] + windows.strip_height
    return dataclasses.replace(
        window,
        state=window.state + windows.strip_height * row_px * F32,
        activations=window.activations + window.outputs,
        inputs=batch * frames * math.prod(latent_hw) * config.z_dim * F32
        + len(windows.row_starts) * len(windows.col_starts) * math.prod(windows.window_px) * F32,
        outputs=(emitted + latent_hw[0] * scale) * row_px * out_bytes,
    )
