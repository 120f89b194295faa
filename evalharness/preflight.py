"""Preflight: what a run will cost, checked before anything is allocated.

Counts tokens, attention and total FLOPs, weight and activation memory, and estimates minutes from
the device's measured matmul throughput. A run whose estimate exceeds ``max_minutes`` or whose memory
exceeds the device is refused with the numbers and how to override, in seconds rather than after an
out-of-memory crash an hour in.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp

from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class PreflightRefusal(RuntimeError):
    """The run would take too long or not fit; the message says the numbers and the overrides."""


@dataclass(frozen=True)
class CostEstimate:
    """What one comparison costs.

    Attributes:
        tokens: video tokens N per sample.
        attention_flops_per_step: self-attention FLOPs of one dense denoising step (all layers, CFG
            batch included).
        total_flops_per_step: all transformer FLOPs of one dense denoising step.
        attention_share: attention / total FLOPs of a dense step.
        sparse_flops_per_step: FLOPs of an average step under the schedule's kept fraction.
        weight_bytes: transformer parameters per device in the parameter dtype.
        activation_bytes: peak activations of one forward (a documented rough model: a few
            [batch, N, dim] buffers, the FFN hidden buffer, attention O(N * tile) scratch).
        device_bytes: memory of one device (host RAM on CPU).
        device_flops_per_s: measured matmul throughput of one device in the compute dtype.
        total_flops: FLOPs of the whole comparison (compile warm-ups, timed runs, noise floor).
        estimated_minutes: ``total_flops / device_flops_per_s`` in minutes.
    """

    tokens: int
    attention_flops_per_step: float
    total_flops_per_step: float
    attention_share: float
    sparse_flops_per_step: float
    weight_bytes: int
    activation_bytes: int
    device_bytes: int
    device_flops_per_s: float
    total_flops: float
    estimated_minutes: float

    def as_metrics(self) -> dict[str, float]:
        """Every field as a ``preflight.<field>`` metric."""
        return {f"preflight.{k}": float(v) for k, v in asdict(self).items()}


def parameter_count(cfg: WanTransformerConfig) -> int:
    """Transformer parameters (weights and biases), from the architecture alone."""
    d, f, t = cfg.dim, cfg.ffn_dim, cfg.text_dim
    patch = cfg.in_channels * cfg.patch_size[0] * cfg.patch_size[1] * cfg.patch_size[2]
    linear = lambda i, o: i * o + o  # noqa: E731
    block = (
        4 * linear(d, d)  # self-attention q, k, v, o
        + 2 * d  # RMSNorm q/k
        + 4 * linear(d, d)  # cross-attention q, k, v, o
        + 2 * d  # cross RMSNorm q/k
        + 2 * d  # affine norm2
        + linear(d, f)
        + linear(f, d)
        + 6 * d  # scale_shift_table
    )
    embed = (
        linear(patch, d)
        + linear(cfg.freq_dim, d)
        + linear(d, d)
        + linear(d, 6 * d)
        + linear(t, d)
        + linear(d, d)
    )
    head = linear(d, cfg.out_channels * patch // cfg.in_channels) + 2 * d
    return cfg.num_layers * block + embed + head


def step_flops(cfg: WanTransformerConfig, tokens: int, batch: int) -> tuple[float, float]:
    """(self-attention FLOPs, total FLOPs) of one forward over ``batch`` samples."""
    d, f, n, text = cfg.dim, cfg.ffn_dim, tokens, cfg.text_len
    attention = 4.0 * n * n * d  # q k^T and p v: 2 n^2 d each
    per_layer = (
        8.0 * n * d * d  # q, k, v, o projections
        + attention
        + 4.0 * n * d * d  # cross q, o
        + 4.0 * text * d * d  # cross k, v on the text tokens
        + 4.0 * n * text * d  # cross attention
        + 4.0 * n * d * f  # FFN
    )
    return batch * cfg.num_layers * attention, batch * cfg.num_layers * per_layer


def device_memory_bytes(device: jax.Device | None = None) -> int:
    """Memory of one device: the accelerator's limit, or the host's physical RAM on CPU."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"])
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def measure_matmul_flops(dtype: str = "float32", size: int | None = None) -> float:
    """Measured FLOP/s of a square matmul on the default device (median of 3 warm runs)."""
    device = jax.devices()[0]
    size = size or (1024 if device.platform == "cpu" else 8192)
    a = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x: x @ x).lower(a).compile()
    jax.block_until_ready(matmul(a))
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a))
        runs.append(time.perf_counter() - start)
    runs.sort()
    return 2.0 * size**3 / runs[1]


def estimate_cost(
    cfg: WanTransformerConfig,
    geometry: VideoGeometry,
    *,
    steps: int,
    cfg_batch: int,
    warm_runs: int,
    kept_fraction: float,
    noise_floor: bool,
    param_dtype: str,
    dtype: str,
    devices: int = 1,
    device_flops_per_s: float | None = None,
    device_bytes: int | None = None,
) -> CostEstimate:
    """Estimates the cost of a dense-vs-sparse comparison.

    Args:
        cfg: transformer architecture.
        geometry: video size.
        steps: denoising steps.
        cfg_batch: samples per forward (2 with classifier-free guidance, else 1).
        warm_runs: timed runs per arm (plus one compile/warm-up run each).
        kept_fraction: the schedule's overall kept fraction of attention pairs.
        noise_floor: whether a second dense arm runs.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        devices: devices the sequence is split over.
        device_flops_per_s: measured throughput; measured now when None.
        device_bytes: device memory; read now when None.
    """
    weight, act = _dtype_bytes("param_dtype", param_dtype), _dtype_bytes("dtype", dtype)
    n = geometry.tokens
    attention, total = step_flops(cfg, n, cfg_batch)
    weight_bytes, activation_bytes = _memory_bytes(cfg, n, cfg_batch, devices, weight, act)
    flops_per_s = device_flops_per_s or measure_matmul_flops(str(dtype))
    runs_per_arm = warm_runs + 1
    dense_arms = 2 if noise_floor else 1
    sparse = total - attention * (1.0 - kept_fraction)
    total_flops = steps * (total * runs_per_arm * dense_arms + sparse * runs_per_arm)
    return CostEstimate(
        tokens=n,
        attention_flops_per_step=attention,
        total_flops_per_step=total,
        attention_share=attention / total,
        sparse_flops_per_step=sparse,
        weight_bytes=weight_bytes,
        activation_bytes=activation_bytes,
        device_bytes=device_bytes or device_memory_bytes(),
        device_flops_per_s=flops_per_s,
        total_flops=total_flops,
        estimated_minutes=total_flops / (flops_per_s * devices) / 60.0,
    )


def _dtype_bytes(name: str, value: str) -> int:
    """Bytes per element of a dtype name; a clear error naming ``name`` for anything else."""
    if value not in _DTYPE_BYTES:
        raise ValueError(f"{name}={value!r} is not supported; use one of {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[value]


def _memory_bytes(
    cfg: WanTransformerConfig, tokens: int, cfg_batch: int, devices: int, weight: int, act: int
) -> tuple[int, int]:
    """(weight bytes, peak activation bytes) per device, from bytes per weight and activation."""
    # Across several devices the large matrices are sharded (models.sharding "fsdp").
    weight_bytes = parameter_count(cfg) * weight // devices
    # Residual stream, normed copy, q, k, v, attention out (6 x N x dim), the FFN hidden (N x ffn),
    # and float32 modulation/norm temporaries (2 x N x dim): the live set of one block.
    activation_bytes = int(
        cfg_batch * tokens * ((6 * cfg.dim + cfg.ffn_dim) * act + 8 * cfg.dim) / devices
    )
    return weight_bytes, activation_bytes


def check(estimate: CostEstimate, *, max_minutes: float, what: str) -> None:
    """Refuses a run that would exceed ``max_minutes`` or the device memory.

    Args:
        estimate: the run's cost.
        max_minutes: the user's limit.
        what: a short description of the run, for the message.

    Raises:
        PreflightRefusal: with the numbers and how to override.
    """
    gib = 1024**3
    problems = []
    needed = estimate.weight_bytes + estimate.activation_bytes
    if needed > estimate.device_bytes:
        problems.append(
            f"memory: weights {estimate.weight_bytes / gib:.1f} GiB + activations "
            f"{estimate.activation_bytes / gib:.1f} GiB exceed the device's "
            f"{estimate.device_bytes / gib:.1f} GiB"
        )
    if estimate.estimated_minutes > max_minutes:
        problems.append(
            f"time: an estimated {estimate.estimated_minutes:,.1f} minutes exceeds max_minutes="
            f"{max_minutes:g} ({estimate.total_flops:.3g} FLOPs at a measured "
            f"{estimate.device_flops_per_s / 1e9:,.1f} GFLOP/s per device)"
        )
    if problems:
        raise PreflightRefusal(
            f"preflight refused {what}: {estimate.tokens:,} tokens per sample, attention "
            f"{estimate.attention_share:.0%} of a dense step's FLOPs. "
            + "; ".join(problems)
            + ". Nothing was allocated. To go on anyway, raise max_minutes (e.g. max_minutes="
            f"{max(estimate.estimated_minutes * 1.2, 1):.0f}), or choose a smaller resolution, fewer "
            "steps or warm_runs, or an accelerator (and parallel.sequence across devices)."
        )
