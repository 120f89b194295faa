"""Warm-run timing: compile and warm-up excluded, block_until_ready, median of N runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jax


def time_call(fn: Callable[[], jax.Array], runs: int = 5) -> dict[str, float]:
    """Times ``fn`` after one warm-up call (which also compiles).

    Wall time is what the tables compare; process CPU time is recorded beside it because the
    benchmark machine is shared, and CPU seconds are less disturbed by other processes.

    Args:
        fn: zero-argument callable returning a JAX array.
        runs: timed runs (>= 1).

    Returns:
        {"median_ms", "min_ms", "max_ms", "cpu_median_ms", "runs"}.
    """
    if runs < 1:
        raise ValueError(f"runs={runs}; need at least 1")
    jax.block_until_ready(fn())
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn())
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return {
        "median_ms": statistics.median(wall),
        "min_ms": min(wall),
        "max_ms": max(wall),
        "cpu_median_ms": statistics.median(cpu),
        "runs": runs,
    }


def time_interleaved(fns: dict[str, Callable[[], jax.Array]], runs: int = 5) -> dict[str, dict]:
    """Times several callables round-robin so drift of a shared machine hits them all alike.

    Every callable is warmed up (and compiled) first; then each of the ``runs`` rounds runs every
    callable once, in order. The statistics per callable are those of :func:`time_call`.

    Args:
        fns: name -> zero-argument callable returning a JAX array.
        runs: rounds (>= 1).

    Returns:
        name -> {"median_ms", "min_ms", "max_ms", "cpu_median_ms", "runs"}.
    """
    if runs < 1:
        raise ValueError(f"runs={runs}; need at least 1")
    for fn in fns.values():
        jax.block_until_ready(fn())
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn())
            wall[name].append((time.perf_counter() - w0) * 1e3)
            cpu[name].append((time.process_time() - c0) * 1e3)
    return {
        name: {
            "median_ms": statistics.median(wall[name]),
            "min_ms": min(wall[name]),
            "max_ms": max(wall[name]),
            "cpu_median_ms": statistics.median(cpu[name]),
            "runs": runs,
        }
        for name in fns
    }
