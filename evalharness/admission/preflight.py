"""Preflight: what a run will cost, checked before anything is allocated.

``estimate_cost`` counts tokens, attention and total FLOPs and a rough weight/activation memory, and
estimates minutes from the device's measured matmul throughput. ``check`` refuses a run whose time
exceeds ``max_minutes`` or whose memory exceeds the device, with the numbers and how to override,
in seconds rather than after an out-of-memory crash an hour in. Given the run's ``MemoryTable``
(``evalharness.estimates.memory_estimate.estimate_memory``: compiled block, routing, exchange and executor buffers
per arm) it judges memory by that table and puts it in the refusal with settings that would fit;
given a ``TimeEstimate`` (``evalharness.estimates.workload.estimate_time``, a roofline on a stated device)
it judges time by that.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass

from evalharness.estimates import (
    GIB,
    MemoryTable,
    TimeEstimate,
    device_memory_bytes,
    dtype_bytes,
    measure_matmul_flops,
    parameter_count,
    step_flops,
)
from evalharness.refusal import PreflightRefusal
from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)


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
    pairs: int = 1,
    forward_batch: int | None = None,
) -> CostEstimate:
    """Estimates the cost of a dense-vs-sparse comparison.

    Args:
        cfg: transformer architecture.
        geometry: video size.
        steps: denoising steps.
        cfg_batch: samples per step (2 with classifier-free guidance, else 1): the FLOPs.
        warm_runs: timed runs per arm (plus one compile/warm-up run each).
        kept_fraction: the schedule's overall kept fraction of attention pairs.
        noise_floor: whether a second dense arm runs.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        devices: devices the sequence is split over.
        device_flops_per_s: measured throughput; measured now when None.
        device_bytes: device memory; read now when None.
        pairs: (prompt, seed) pairs of a prompt suite; every pair runs every arm.
        forward_batch: samples per model call (the activations' batch; 1 when the guidance
            passes run separately); default ``cfg_batch``.
    """
    weight, act = dtype_bytes("param_dtype", param_dtype), dtype_bytes("dtype", dtype)
    n = geometry.tokens
    attention, total = step_flops(cfg, n, cfg_batch)
    live = cfg_batch if forward_batch is None else forward_batch
    weight_bytes, activation_bytes = _memory_bytes(cfg, n, live, devices, weight, act)
    flops_per_s = device_flops_per_s or measure_matmul_flops(str(dtype))
    runs_per_arm = warm_runs + 1
    dense_arms = 2 if noise_floor else 1
    sparse = total - attention * (1.0 - kept_fraction)
    total_flops = pairs * steps * (total * runs_per_arm * dense_arms + sparse * runs_per_arm)
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


# Config keys of each arm's executor, for advice.
_EXECUTOR_KEYS = {
    "dense": "kernel.dense_executor",
    "noise_floor": "kernel.noise_floor_executor",
    "sparse": "kernel.dense_executor",
}


def memory_advice(table: MemoryTable) -> list[str]:
    """Settings that shrink what does not fit, largest effect first."""
    advice = []
    if table.batch > 1:
        advice.append(
            "guidance_passes=separate (the conditional and unconditional passes one after the "
            "other: half the activations, the same FLOPs)"
        )
    for arm in table.arms:
        if table.peak(arm) > table.device_bytes and table.dominant(arm) == "attention executor":
            held = table.rows["attention executor"][arm] / GIB
            advice.append(
                f"the {arm} arm's executor {table.executors.get(arm, '?')} holds {held:,.1f} GiB "
                f"of temporaries: use a flash-style executor, {_EXECUTOR_KEYS.get(arm, 'kernel')}"
                "=b0 (or splash on a TPU, cudnn on a GPU)"
            )
    if max(table.phase_bytes(a)["encode"] for a in table.arms) == table.peak_bytes:
        advice.append(
            "the text encoder's phase is the peak: encode on the host, or reuse cached "
            "embeddings (cache_dir)"
        )
    advice.append(
        f"more devices: parallel.sequence={2 * table.devices} (tokens, activations and fsdp "
        "weights split across them)"
    )
    if table.dtype == "float32":
        advice.append("dtype=bfloat16 model.param_dtype=bfloat16 (half the bytes)")
    advice.append("a smaller resolution (activations grow with N, N^2 executors with N^2)")
    return advice


def _memory_problem(
    estimate: CostEstimate, memory: MemoryTable | None, advice: list[str] | None = None
) -> str | None:
    """The memory half of a refusal, or None when it fits (``advice``: checked settings, else
    ``memory_advice``'s unchecked ones)."""
    if memory is None:
        if estimate.weight_bytes + estimate.activation_bytes <= estimate.device_bytes:
            return None
        return (
            f"memory: weights {estimate.weight_bytes / GIB:.1f} GiB + activations "
            f"{estimate.activation_bytes / GIB:.1f} GiB exceed the device's "
            f"{estimate.device_bytes / GIB:.1f} GiB"
        )
    if memory.fits:
        return None
    worst = max(memory.arms, key=memory.peak)
    heading = "To fit (each setting applied and planned again):" if advice else "To fit:"
    lines = "".join(f"\n- {line}" for line in (advice or memory_advice(memory)))
    return (
        f"memory: the {worst} arm peaks at {memory.peak(worst) / GIB:,.2f} GiB per device "
        f"(largest part: {memory.dominant(worst)}), more than the {memory.device}'s "
        f"{memory.device_bytes / GIB:,.2f} GiB\n\n{memory.to_markdown()}\n\n{heading}{lines}\n"
    )


def check(
    estimate: CostEstimate,
    *,
    max_minutes: float,
    what: str,
    memory: MemoryTable | None = None,
    timing: TimeEstimate | None = None,
    advice: list[str] | None = None,
) -> None:
    """Refuses a run that would exceed ``max_minutes`` or the device memory.

    Args:
        estimate: the run's cost.
        max_minutes: the user's limit.
        what: a short description of the run, for the message.
        memory: the run's ``MemoryTable`` (``evalharness.estimates.memory_estimate.estimate_memory``); without it,
            the rough ``estimate.weight_bytes + activation_bytes`` is checked.
        timing: a target's ``TimeEstimate`` (``evalharness.estimates.workload.estimate_time``); without it,
            ``estimate.estimated_minutes``.
        advice: settings checked to fit (``evalharness.admission.advice.checked_advice``), printed
            instead of the unchecked ``memory_advice``.

    Raises:
        PreflightRefusal: with the numbers, the memory table and what to change.
    """
    problems = [p for p in (_memory_problem(estimate, memory, advice),) if p]
    minutes = estimate.estimated_minutes if timing is None else timing.total_minutes
    if minutes > max_minutes:
        basis = (
            f"{estimate.total_flops:.3g} FLOPs at a measured "
            f"{estimate.device_flops_per_s / 1e9:,.1f} GFLOP/s per device"
            if timing is None
            else f"time estimate on {timing.assumption}"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        problems.append(
            f"time: an estimated {minutes:,.1f} minutes exceeds max_minutes={max_minutes:g} "
            f"({basis}; compilation not included; load average {load:.1f} on "
            f"{os.cpu_count()} cores)"
        )
    if problems:
        raise PreflightRefusal(
            f"preflight refused {what}: {estimate.tokens:,} tokens per sample, attention "
            f"{estimate.attention_share:.0%} of a dense step's FLOPs. "
            + "; ".join(problems)
            + ". Nothing was allocated. "
            + _time_advice(minutes, max_minutes)
        )


# Past a day, raising max_minutes is not advice anyone should take.
_ACCELERATOR_MINUTES = 24 * 60


def _time_advice(minutes: float, max_minutes: float) -> str:
    """What to do about a run over ``max_minutes``: a day's run or more is one for an
    accelerator (plan it from here with a dry run); a shorter one may just need a higher limit."""
    if minutes > _ACCELERATOR_MINUTES:
        return (
            f"This is an accelerator's run ({minutes / 60 / 24:,.1f} days here): plan it from this "
            "machine with dry_run=true target=tpu-v6e-8 (or target=h200), or run the CPU preset "
            "here (resolution=cpu), or fewer steps or warm_runs."
        )
    return (
        f"To go on anyway, raise max_minutes (e.g. max_minutes={max(minutes * 1.2, 1):.0f}), or "
        "choose a smaller resolution, fewer steps or warm_runs, or an accelerator (and "
        "parallel.sequence across devices)."
    )
