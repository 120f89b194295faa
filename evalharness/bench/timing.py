"""The benchmarks' timing: the run's interleaved timer (``evalharness.arms.time_interleaved``)
after one warm-up call of each callable, in milliseconds with this process's CPU time beside the
wall time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

from evalharness.arms import RunTimes, check_warm_runs, time_interleaved


def ms_stats(times: RunTimes) -> dict[str, float]:
    """One computation's timed runs as {"median_ms", "min_ms", "max_ms", "cpu_median_ms"}."""
    return {
        "median_ms": times.median_s * 1e3,
        "min_ms": times.min_s * 1e3,
        "max_ms": times.max_s * 1e3,
        "cpu_median_ms": statistics.median(times.cpu_s) * 1e3,
    }


def cpu_time_measures_compute() -> bool:
    """Whether this process's CPU time measures the timed computation: on the CPU backend it
    does; on an accelerator the host only dispatches and waits, so its CPU medians are shown but
    no speedup is read from them (they can be zero)."""
    return jax.default_backend() == "cpu"


def time_warm(
    fns: dict[str, Callable[[], Any]],
    runs: int = 5,
    *,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    block: Callable[[Any], Any] = jax.block_until_ready,
) -> dict[str, RunTimes]:
    """Times several callables round-robin so drift of a shared machine hits them all alike:
    each is called once untimed (compile, warm-up), then ``runs`` rounds call each once, timed
    to the completion of its outputs.

    Args:
        fns: name -> zero-argument callable returning JAX arrays.
        runs: rounds (>= 1).
        clock, cpu_clock, block: wall and process-CPU seconds and the wait for a call's outputs
            (injected by tests).

    Returns:
        name -> its run times (wall and CPU seconds of every round), in the order of ``fns``.

    Raises:
        ValueError: ``runs`` is not an integer >= 1.
    """
    check_warm_runs(runs)  # before the warm-ups: a refused count compiles nothing
    for fn in fns.values():
        block(fn())
    return time_interleaved(fns, runs, clock=clock, cpu_clock=cpu_clock, block=block)


def time_warm_ms(fns: dict[str, Callable[[], Any]], runs: int = 5, **clocks) -> dict[str, dict]:
    """:func:`time_warm` (same arguments) as name -> :func:`ms_stats` plus "runs"."""
    times = time_warm(fns, runs, **clocks)
    return {name: {**ms_stats(t), "runs": runs} for name, t in times.items()}
