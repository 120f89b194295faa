"""The work of a run outside the denoising loops (``evalharness.estimates.workload``'s), which
the loops' medians leave out but a user waits for (and ``max_minutes`` limits):

| row | when | work | rate (source) |
|---|---|---|---|
| weight loading | once | transformer + text encoder + VAE bytes read and put on the device | ``LOAD_BYTES_PER_S`` (stated) |
| text encoding | each pair | UMT5 forward over ``text_len`` tokens, 1 or 2 prompts | the target's matmul rate |
| VAE decode | each arm, each pair | the decoder's FLOPs at float32, tiled as the run tiles | ``VAE_EFFICIENCY`` of the float32 peak (stated) |
| host: encode | each arm, each pair | ``<arm>.mp4`` + ``<arm>.lossless.mkv`` | ``HOST_NS_PER_PIXEL`` (measured) |
| host: measure | each measured arm, each pair | PSNR, SSIM, FFmpeg PSNR, codec noise | ``HOST_NS_PER_PIXEL`` (measured) |
| host: side by side | each pair | ``side_by_side.mp4`` | ``HOST_NS_PER_PIXEL`` (measured) |

The VAE decoder's FLOPs are counted from the traced program (``evalharness.estimates.traced_flops``)
of one latent frame's decode (the first frame and a later one differ) at two small sizes; a
convolution's FLOPs are linear in its area, so the two points give any size. Compile time is not a
row: on an accelerator the dry run's chip compile (``chip_compile=step``) prints it; on a CPU the
planner adds it, with the loops' non-matmul work and the slower second control, as measured
(``evalharness.estimates.cpu_calibration``, ``evalharness.admission.run_timing``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.estimates.traced_flops import matmul_flops
from models.peak_memory import umt5_parameter_count
from models.text_encoder import UMT5Config
from models.vae import TilingConfig, WanVAE, WanVAEConfig
from models.vae_tiling import tile_windows

# Host side of a run, nanoseconds per pixel of one arm's video (frames x height x width), measured
# with ``python -m evalharness.bench.host_side resolution=480p resolution.frames=17 warm_runs=3``
# (17 x 480 x 832, 3 rounds, medians; load 1.5).
HOST_MEASURED_ON = "this workplace's 2-core x86_64 CI VM, 2026-12-02"
HOST_NS_PER_PIXEL: Mapping[str, float] = {
    "encode": 58.0,  # per arm: the viewable mp4 and the lossless mkv
    "measure": 358.0,  # per measured arm against the dense arm
    "side_by_side": 116.0,  # per pair
}
# Stated, not measured: a persistent disk's sequential read, which bounds reading safetensors and
# putting them on the device (a local NVMe or a warm page cache is several times faster).
LOAD_BYTES_PER_S = 1.0e9
# Stated, not measured on an accelerator: the VAE's float32 3-D convolutions at half the float32
# peak (the seed did not time its decode). On a CPU target the target's own efficiency is used.
VAE_EFFICIENCY = 0.5


@dataclass(frozen=True)
class RunWork:
    """What a run does besides its denoising loops.

    Attributes:
        load_bytes: bytes read from the checkpoint and put on the device (0 for a seeded preset).
        text_flops: FLOPs of encoding one pair's prompts.
        decode_flops: FLOPs of one arm's VAE decode.
        video_pixels: frames x height x width of one arm's video.
        pairs: (prompt, seed) pairs.
    """

    load_bytes: float
    text_flops: float
    decode_flops: float
    video_pixels: int
    pairs: int


def text_encoder_flops(config: UMT5Config, tokens: int, prompts: int) -> float:
    """FLOPs of encoding ``prompts`` prompts of ``tokens`` tokens: 2 per weight and token, plus
    the self-attention's ``4 N^2 d`` per layer and head (the embedding is a lookup)."""
    _, layers = umt5_parameter_count(config)
    attention = 4.0 * tokens * tokens * config.d_kv * config.num_heads * config.num_layers
    return prompts * (2.0 * layers * tokens + attention)


@functools.cache
def _chunk_flops(config: WanVAEConfig, hw: tuple[int, int]) -> tuple[float, float]:
    """FLOPs of decoding the first latent frame and a later one at latent ``hw``."""
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    graph, state = nnx.split(vae)
    z = jax.ShapeDtypeStruct((1, 1, *hw, config.z_dim), jnp.float32)
    out = []
    for first in (True, False):

        def chunk(state, x, first=first):
            model = nnx.merge(graph, state)
            return model.decoder(model.post_quant_conv(x), None, first)

        out.append(matmul_flops(chunk, state, z))
    return out[0], out[1]


def vae_decode_flops(
    config: WanVAEConfig,
    latent_frames: int,
    latent_hw: tuple[int, int],
    tiling: TilingConfig | None,
) -> float:
    """FLOPs of decoding ``[1, latent_frames, h, w, C]`` latents, tile by tile when ``tiling``.

    Linear in the decoded area (8 x 8 and 16 x 16 fix the line); a tiled decode computes each
    tile's whole area, overlaps included.
    """
    first_s, later_s = _chunk_flops(config, (8, 8))
    first_l, later_l = _chunk_flops(config, (16, 16))
    slope_first = (first_l - first_s) / (256 - 64)
    slope_later = (later_l - later_s) / (256 - 64)
    area, tiles = _tiled_area(config, latent_hw, tiling)
    first = tiles * (first_s - 64 * slope_first) + slope_first * area
    later = tiles * (later_s - 64 * slope_later) + slope_later * area
    return max(0.0, first) + (latent_frames - 1) * max(0.0, later)


def _tiled_area(
    config: WanVAEConfig, latent_hw: tuple[int, int], tiling: TilingConfig | None
) -> tuple[int, int]:
    """The latent area a decode computes and how many decoder calls make it: the whole latent
    once, or every distinct full-size tile window of ``models.vae_tiling.tile_windows``
    (overlaps counted in each window)."""
    h, w = latent_hw
    scale = config.scale_factor_spatial
    if tiling is None or (
        h <= tiling.tile_sample_min_height // scale and w <= tiling.tile_sample_min_width // scale
    ):
        return h * w, 1
    windows = tile_windows(tiling, h, w, scale)
    count = len(windows.row_starts) * len(windows.col_starts)
    return count * windows.window_hw[0] * windows.window_hw[1], count


def run_rows(
    work: RunWork,
    arms: Mapping[str, int],
    *,
    flops_per_s: float,
    float32_flops_per_s: float,
    vae_efficiency: float,
    vae_rate: str,
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Seconds of each row (module docstring) by column: an arm's name, or ``shared``.

    Args:
        work: what the run does besides its loops.
        arms: the arms that run (their names).
        flops_per_s: the target's sustained rate for the text encoder's matmuls.
        float32_flops_per_s: the target's float32 peak (the VAE decodes in float32).
        vae_efficiency: fraction of ``float32_flops_per_s`` the decoder reaches.
        vae_rate: that rate and its source, in words.

    Returns:
        ``(rows, sources)``: row -> column -> seconds for the whole run (every pair), and row ->
        where its rate comes from.
    """
    pairs, px = work.pairs, work.video_pixels
    measured = [a for a in arms if a != "dense"]
    ns = HOST_NS_PER_PIXEL
    columns = [*arms, "shared"]
    rows: dict[str, dict[str, float]] = {
        "weight loading": {"shared": work.load_bytes / LOAD_BYTES_PER_S},
        "text encoding": {"shared": pairs * work.text_flops / flops_per_s},
        "VAE decode": dict.fromkeys(
            arms, pairs * work.decode_flops / (float32_flops_per_s * vae_efficiency)
        ),
        "host: encode": dict.fromkeys(arms, pairs * px * ns["encode"] * 1e-9),
        "host: measure": dict.fromkeys(measured, pairs * px * ns["measure"] * 1e-9),
        "host: side by side": {"shared": pairs * px * ns["side_by_side"] * 1e-9},
    }
    rows = {name: {c: row.get(c, 0.0) for c in columns} for name, row in rows.items()}
    sources = {
        "weight loading": (
            f"{work.load_bytes / 1e9:,.1f} GB at {LOAD_BYTES_PER_S / 1e9:.1f} GB/s (stated: a "
            "persistent disk's read)"
            if work.load_bytes
            else "seeded weights (a seeded preset, model.checkpoint=random): drawn, nothing read"
        ),
        "text encoding": f"{_flop(work.text_flops)} per pair at the matmul rate",
        "VAE decode": f"{_flop(work.decode_flops)} per arm (the traced decoder's convolutions), float32 at {vae_rate}",
        "host": (
            "encode {encode:.0f}, measure {measure:.0f}, side by side {side_by_side:.0f} ns per "
            "pixel, measured on {on}"
        ).format(**ns, on=HOST_MEASURED_ON),
    }
    return rows, sources


def _flop(flops: float) -> str:
    """``1.03 PFLOP``, ``9.69 TFLOP``, ``2.10 GFLOP``."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9)):
        if flops >= scale:
            return f"{flops / scale:,.2f} {prefix}FLOP"
    return f"{flops:,.0f} FLOP"


def run_work(
    *,
    load_bytes: float,
    text_config: UMT5Config,
    text_tokens: int,
    prompts: int,
    vae_config: WanVAEConfig,
    latent_shape: tuple[int, int, int],
    tiling: TilingConfig | None,
    pairs: int,
) -> RunWork:
    """The ``RunWork`` of a run (``latent_shape``: latent frames, height, width)."""
    frames, h, w = latent_shape
    scale = vae_config.scale_factor_spatial
    video_frames = 1 + vae_config.scale_factor_temporal * (frames - 1)
    return RunWork(
        load_bytes=float(load_bytes),
        text_flops=text_encoder_flops(text_config, text_tokens, prompts),
        decode_flops=vae_decode_flops(vae_config, frames, (h, w), tiling),
        video_pixels=int(video_frames * h * scale * w * scale),
        pairs=pairs,
    )
