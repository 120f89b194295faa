"""What a comparison computes, and how long that takes on a device: FLOPs, bytes, a roofline.

``parameter_count`` and ``step_flops`` count from the architecture alone. ``estimate_time`` turns
them into minutes on a ``evalharness.estimates.targets.DeviceTarget``, per arm, with a roofline per
denoising step on one device:

    seconds = max(FLOPs / (peak x efficiency), bytes / HBM bandwidth)

- FLOPs: the transformer's matmuls (``step_flops``) split over P devices; the sparse arm's
  attention scaled by the schedule's kept fraction (routing, under 1% of it, is left out);
- bytes: every weight once per forward (under "fsdp" each device still streams every gathered
  weight), and each block's main buffers read and written once, 16 x [B, N / P, dim] +
  2 x [B, N / P, ffn] in the compute dtype. K/V tiles a flash kernel re-reads stay in on-chip
  memory and are not counted.

Runs per arm follow ``evalharness.run``: the dense arm warm-up + ``warm_runs`` timed runs, the
noise floor the same (it is the second dense control), the sparse arm warm-up + ``warm_runs`` + one
routing-recording run. Compilation is not included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evalharness.estimates.targets import DeviceTarget
from evalharness.formatting import markdown_table
from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def dtype_bytes(name: str, value: str) -> int:
    """Bytes per element of a dtype name; a clear error naming ``name`` for anything else."""
    if value not in _DTYPE_BYTES:
        raise ValueError(f"{name}={value!r} is not supported; use one of {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[value]


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


@dataclass(frozen=True)
class TimeEstimate:
    """Minutes per arm on a target, from a per-step roofline.

    Attributes:
        target: the target's name.
        assumption: the figures the roofline used (``DeviceTarget.assumption``).
        step_seconds: arm -> seconds of one denoising step on one device.
        bound: arm -> "compute" or "memory", the roofline side that bounds the step.
        runs: arm -> loop executions (warm-up, timed and recording runs).
        minutes: arm -> minutes of all its runs (steps x runs x step_seconds).
    """

    target: str
    assumption: str
    step_seconds: Mapping[str, float]
    bound: Mapping[str, str]
    runs: Mapping[str, int]
    minutes: Mapping[str, float]

    @property
    def total_minutes(self) -> float:
        """Minutes of every arm together."""
        return sum(self.minutes.values())

    def as_metrics(self) -> dict[str, float]:
        """``time.<arm>.step_s``, ``time.<arm>.minutes`` and ``time.total_minutes``."""
        out = {f"time.{arm}.step_s": s for arm, s in self.step_seconds.items()}
        out.update({f"time.{arm}.minutes": m for arm, m in self.minutes.items()})
        out["time.total_minutes"] = self.total_minutes
        return out

    def to_markdown(self) -> str:
        """One row per arm, then the assumption."""
        rows = [
            {
                "arm": arm,
                "step_s": self.step_seconds[arm],
                "bound": self.bound[arm],
                "runs": self.runs[arm],
                "minutes": self.minutes[arm],
            }
            for arm in self.minutes
        ]
        columns = [
            ("arm", "arm", "{}"),
            ("s / step / device", "step_s", "{:.2f}"),
            ("bound", "bound", "{}"),
            ("runs", "runs", "{}"),
            ("minutes", "minutes", "{:.1f}"),
        ]
        return (
            markdown_table(rows, columns)
            + f"\n\nTotal {self.total_minutes:.1f} min on {self.assumption}."
        )


def estimate_time(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    target: DeviceTarget,
    *,
    steps: int,
    cfg_batch: int,
    warm_runs: int,
    kept_fraction: float,
    noise_floor: bool,
    param_dtype: str,
    dtype: str,
    devices: int | None = None,
) -> TimeEstimate:
    """Roofline minutes of each arm of a comparison on ``target`` (see the module docstring).

    Args:
        tcfg: transformer architecture.
        geometry: the video.
        target: the device (``evalharness.estimates.targets.get_target``).
        steps: denoising steps.
        cfg_batch: samples per forward (2 with classifier-free guidance).
        warm_runs: timed runs of the dense and sparse arms.
        kept_fraction: the schedule's overall kept fraction (1 for a dense schedule).
        noise_floor: whether the noise-floor arm runs.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        devices: P (default ``target.devices``).

    Returns:
        The ``TimeEstimate``.
    """
    p = devices or target.devices
    act, weight = dtype_bytes("dtype", str(dtype)), dtype_bytes("param_dtype", str(param_dtype))
    n_dev = -(-geometry.tokens // p)
    attention, total = step_flops(tcfg, geometry.tokens, cfg_batch)
    per_block = cfg_batch * n_dev * (16 * tcfg.dim + 2 * tcfg.ffn_dim) * act
    bytes_moved = parameter_count(tcfg) * weight + tcfg.num_layers * per_block
    routed = kept_fraction < 1.0
    flops = {
        "dense": total / p,
        "noise_floor": total / p,
        "sparse": (total - attention * (1.0 - kept_fraction)) / p,
    }
    # The noise-floor arm is the second dense control: timed like the dense arm.
    runs = {
        "dense": warm_runs + 1,
        "noise_floor": warm_runs + 1,
        "sparse": warm_runs + 1 + int(routed),
    }
    if not noise_floor:
        del flops["noise_floor"], runs["noise_floor"]
    timed = {arm: target.step_seconds(f, bytes_moved, str(dtype)) for arm, f in flops.items()}
    return TimeEstimate(
        target=target.name,
        assumption=target.assumption(str(dtype)),
        step_seconds={arm: s for arm, (s, _) in timed.items()},
        bound={arm: b for arm, (_, b) in timed.items()},
        runs=runs,
        minutes={arm: steps * runs[arm] * timed[arm][0] / 60.0 for arm in timed},
    )
