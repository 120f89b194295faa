"""Preflight: refuses a run that does not fit, with the numbers, before anything is allocated.

``check`` judges the run's sizing once: memory by its ``MemoryTable`` and time by its
``JobEstimate`` (every phase of the job: measured where it was, else the FLOP model). A refusal carries the
memory table, settings that would fit, and what to do about the time.
"""

from __future__ import annotations

import os

from evalharness.estimates import FlopCount, JobEstimate, MemoryTable
from evalharness.refusal import PreflightRefusal


def check(
    flops: FlopCount,
    memory: MemoryTable,
    estimate: JobEstimate,
    *,
    max_minutes: float,
    what: str,
    advice: list[str],
) -> None:
    """Refuses a run that would exceed the device memory or ``max_minutes``.

    Args:
        flops: the run's FLOP count (tokens and attention share, for the message).
        memory: the run's per-device ``MemoryTable``.
        estimate: the whole job's time, phase by phase, on the device it plans for.
        max_minutes: the user's limit.
        what: a short description of the run, for the message.
        advice: settings checked to fit (``evalharness.admission.advice.checked_advice``), printed
            when the memory does not fit (empty when it does).

    Raises:
        PreflightRefusal: with the numbers, the memory table and what to change.
    """
    problems = []
    if (problem := memory.problem()) is not None:
        lines = "".join(f"\n- {line}" for line in advice)
        problems.append(
            f"{problem}\n\n{memory.to_markdown()}\n\n"
            f"To fit (each setting applied and planned again):{lines}\n"
        )
    minutes = estimate.total_minutes
    if minutes > max_minutes:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        problems.append(
            f"time: an estimated {minutes:,.1f} minutes exceeds max_minutes={max_minutes:g} "
            f"(the whole job: {estimate.summary()}; load average {load:.1f} on "
            f"{os.cpu_count()} cores)"
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
