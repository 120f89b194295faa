"""Preflight: refuses a run that does not fit, with the numbers, before anything is allocated.

``check`` judges the run's plan once: memory by its ``MemoryTable``
(``evalharness.estimates.memory_estimate.estimate_memory``: compiled block, routing, exchange and
executor buffers per arm, the compiler's figures where one ran) and time by its ``TimeEstimate``
(``evalharness.estimates.workload.estimate_time``: loops, compiles excluded, and the work outside
them). A refusal carries the memory table, settings that would fit, and what to do about the time.
"""

from __future__ import annotations

import os

from evalharness.estimates import GIB, FlopCount, MemoryTable, TimeEstimate
from evalharness.refusal import PreflightRefusal

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


def _memory_problem(memory: MemoryTable, advice: list[str] | None = None) -> str | None:
    """The memory half of a refusal, or None when it fits (``advice``: checked settings, else
    ``memory_advice``'s unchecked ones)."""
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
    flops: FlopCount,
    memory: MemoryTable,
    timing: TimeEstimate,
    *,
    max_minutes: float,
    what: str,
    advice: list[str] | None = None,
) -> None:
    """Refuses a run that would exceed the device memory or ``max_minutes``.

    Args:
        flops: the run's FLOP count (tokens and attention share, for the message).
        memory: the run's per-device ``MemoryTable``.
        timing: the run's ``TimeEstimate`` on the device it plans for.
        max_minutes: the user's limit.
        what: a short description of the run, for the message.
        advice: settings checked to fit (``evalharness.admission.advice.checked_advice``), printed
            instead of the unchecked ``memory_advice``.

    Raises:
        PreflightRefusal: with the numbers, the memory table and what to change.
    """
    problems = [p for p in (_memory_problem(memory, advice),) if p]
    minutes = timing.total_minutes
    if minutes > max_minutes:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        problems.append(
            f"time: an estimated {minutes:,.1f} minutes exceeds max_minutes={max_minutes:g} "
            f"(time estimate on {timing.assumption}; compilation not included; load average "
            f"{load:.1f} on {os.cpu_count()} cores)"
        )
    if problems:
        raise PreflightRefusal(
            f"preflight refused {what}: {flops.tokens:,} tokens per sample, attention "
            f"{flops.attention_share:.0%} of a dense step's FLOPs. "
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
