"""What a comparison computes, counted from the architecture alone: parameters, FLOPs per step
and of every loop (``evalharness.estimates.workload`` turns them into time)."""

from __future__ import annotations

from dataclasses import dataclass

from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry


def parameter_count(tcfg: WanTransformerConfig) -> int:
    """Transformer parameters (weights and biases), from the architecture alone."""
    d, f, t = tcfg.dim, tcfg.ffn_dim, tcfg.text_dim
    patch = tcfg.in_channels * tcfg.patch_size[0] * tcfg.patch_size[1] * tcfg.patch_size[2]
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
        + linear(tcfg.freq_dim, d)
        + linear(d, d)
        + linear(d, 6 * d)
        + linear(t, d)
        + linear(d, d)
    )
    head = linear(d, tcfg.out_channels * patch // tcfg.in_channels) + 2 * d
    return tcfg.num_layers * block + embed + head


def step_flops(tcfg: WanTransformerConfig, tokens: int, batch: int) -> tuple[float, float]:
    """(self-attention FLOPs, total FLOPs) of one forward over ``batch`` samples."""
    d, f, n, text = tcfg.dim, tcfg.ffn_dim, tokens, tcfg.text_len
    attention = 4.0 * n * n * d  # q k^T and p v: 2 n^2 d each
    per_layer = (
        8.0 * n * d * d  # q, k, v, o projections
        + attention
        + 4.0 * n * d * d  # cross q, o
        + 4.0 * text * d * d  # cross k, v on the text tokens
        + 4.0 * n * text * d  # cross attention
        + 4.0 * n * d * f  # FFN
    )
    return batch * tcfg.num_layers * attention, batch * tcfg.num_layers * per_layer


@dataclass(frozen=True)
class FlopCount:
    """The FLOPs of a dense-vs-sparse comparison, counted from the architecture alone.

    Attributes:
        tokens: video tokens N per sample.
        attention_flops_per_step: self-attention FLOPs of one dense denoising step (all layers,
            guidance batch included).
        total_flops_per_step: all transformer FLOPs of one dense denoising step.
        sparse_flops_per_step: FLOPs of an average sparse step at the schedule's kept fraction.
        total_flops: FLOPs of every loop the comparison runs (warm-ups, timed runs, noise
            floor, every pair).
    """

    tokens: int
    attention_flops_per_step: float
    total_flops_per_step: float
    sparse_flops_per_step: float
    total_flops: float

    @property
    def attention_share(self) -> float:
        """Self-attention's share of a dense step's FLOPs."""
        return self.attention_flops_per_step / self.total_flops_per_step

    def as_metrics(self) -> dict[str, float]:
        """Every count and the attention share as ``preflight.<name>``."""
        names = (*self.__dataclass_fields__, "attention_share")
        return {f"preflight.{name}": float(getattr(self, name)) for name in names}


def count_flops(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    *,
    steps: int,
    guidance_batch: int,
    warm_runs: int,
    kept_fraction: float,
    noise_floor: bool,
    pairs: int = 1,
) -> FlopCount:
    """Counts the FLOPs of a comparison's loops (every arm's warm-up and timed runs, every pair).

    Args:
        tcfg: transformer architecture.
        geometry: video size.
        steps: denoising steps.
        guidance_batch: samples per step (2 with classifier-free guidance, else 1).
        warm_runs: timed runs per arm (plus one warm-up run each).
        kept_fraction: the schedule's overall kept fraction of attention pairs.
        noise_floor: whether a second dense arm runs.
        pairs: (prompt, seed) pairs; every pair runs every arm.
    """
    attention, total = step_flops(tcfg, geometry.tokens, guidance_batch)
    sparse = total - attention * (1.0 - kept_fraction)
    dense_arms = 2 if noise_floor else 1
    runs = warm_runs + 1
    return FlopCount(
        tokens=geometry.tokens,
        attention_flops_per_step=attention,
        total_flops_per_step=total,
        sparse_flops_per_step=sparse,
        total_flops=pairs * steps * runs * (total * dense_arms + sparse),
    )
