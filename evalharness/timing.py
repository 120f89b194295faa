"""Wall-clock timing of compiled JAX work: compilation apart, median of warm runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import jax


@dataclass(frozen=True)
class RunTimes:
    """Seconds of repeated warm runs of one compiled computation.

    Attributes:
        runs_s: every warm run, in order.
        steps: denoising steps per run (for per-step time); 1 for non-loop work.
    """

    runs_s: tuple[float, ...]
    steps: int = 1

    @property
    def median_s(self) -> float:
        """Median seconds of a warm run."""
        return float(statistics.median(self.runs_s))

    @property
    def min_s(self) -> float:
        """Fastest warm run, in seconds."""
        return float(min(self.runs_s))

    @property
    def max_s(self) -> float:
        """Slowest warm run, in seconds."""
        return float(max(self.runs_s))

    @property
    def per_step_s(self) -> float:
        """Median seconds per denoising step."""
        return self.median_s / self.steps

    def summary(self) -> dict[str, float]:
        """Median, min, max and per-step seconds, for metrics."""
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "per_step_s": self.per_step_s,
        }

    def to_json(self) -> dict[str, Any]:
        """The runs as a JSON-able dict (read back by :meth:`from_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunTimes:
        """Reads what :meth:`to_json` wrote."""
        return cls(tuple(data["runs_s"]), int(data["steps"]))


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Runs ``fn`` once, waits for every output array, and returns (result, seconds)."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    jax.block_until_ready(result)
    return result, time.perf_counter() - start


def time_warm_runs(
    fn: Callable[..., Any], *args: Any, warm_runs: int, steps: int = 1
) -> tuple[Any, RunTimes]:
    """Times ``warm_runs`` executions of an already-compiled ``fn``.

    The caller compiles first (ahead of time, timed separately), so no run here includes tracing or
    compilation.

    Args:
        fn: a compiled callable (e.g. ``jax.jit(f).lower(...).compile()``).
        *args: its arguments, identical for every run.
        warm_runs: how many timed runs (>= 1).
        steps: denoising steps per run, for the per-step figure.

    Returns:
        The last run's result and the run times.
    """
    if warm_runs < 1:
        raise ValueError(f"warm_runs must be >= 1, got {warm_runs}")
    runs = []
    result = None
    for _ in range(warm_runs):
        result, seconds = timed(fn, *args)
        runs.append(seconds)
    return result, RunTimes(tuple(runs), steps)


class TimedArm(Protocol):
    """What the timing metrics read from an arm (``evalharness.arms.ArmResult`` fits)."""

    label: str
    times: RunTimes | None
    compile_s: float
    warmup_s: float
    decode_s: float


def arm_timing_metrics(arm: TimedArm) -> dict[str, float]:
    """One timed arm's metrics: ``<label>_{median,min,max,per_step}_s`` and
    ``{compile,warmup,decode}_<label>_s``.

    Raises:
        ValueError: the arm was not timed (no warm runs).
    """
    if arm.times is None:
        raise ValueError(f"the {arm.label} arm has no warm-run timings")
    metrics = {f"{arm.label}_{name}": value for name, value in arm.times.summary().items()}
    metrics[f"compile_{arm.label}_s"] = arm.compile_s
    metrics[f"warmup_{arm.label}_s"] = arm.warmup_s
    metrics[f"decode_{arm.label}_s"] = arm.decode_s
    return metrics


def timing_metrics(
    dense: TimedArm,
    sparse: TimedArm,
    noise_floor: TimedArm | None = None,
    *,
    executors: dict[str, str] | None = None,
) -> dict[str, float]:
    """Every timed arm's metrics and the speedups of the sparse arm.

    Each timed dense arm is a dense control; ``speedup`` (the headline, and what the gate reads) is
    the fastest control's median over the sparse median, so a sparse kernel is never credited for
    beating a slow dense one. ``speedup_vs_<executor>`` is the ratio against each control by name:
    ``speedup_vs_b0`` is the kernel effect (our dense tiled kernel against our sparse one).

    Args:
        dense: the dense arm (timed).
        sparse: the sparse arm (timed).
        noise_floor: the second dense arm; a dense control too when it was timed.
        executors: arm label ("dense", "noise_floor") -> dense executor name; without it the
            controls are named by their arm label.

    Returns:
        Flat metrics, including ``speedup``, ``speedup_vs_<name>`` per control and
        ``dense_controls`` (how many were timed).
    """
    arms = [dense, sparse] + ([noise_floor] if noise_floor and noise_floor.times else [])
    metrics: dict[str, float] = {}
    for arm in arms:
        metrics.update(arm_timing_metrics(arm))
    names = executors or {}
    controls = {names.get(arm.label, arm.label): arm for arm in arms if arm is not sparse}
    sparse_s = sparse.times.median_s
    for name, arm in controls.items():
        metrics[f"speedup_vs_{name}"] = arm.times.median_s / sparse_s
    metrics["speedup"] = min(arm.times.median_s for arm in controls.values()) / sparse_s
    metrics["dense_controls"] = len(controls)
    return metrics


def fastest_control(metrics: dict[str, float]) -> str:
    """The dense control ``speedup`` is measured against: the one with the smallest
    ``speedup_vs_<name>`` ratio, i.e. the fastest dense median."""
    ratios = {
        key.removeprefix("speedup_vs_"): value
        for key, value in metrics.items()
        if key.startswith("speedup_vs_")
    }
    if not ratios:
        raise ValueError("no speedup_vs_<control> metrics: no dense control was timed")
    return min(ratios, key=ratios.get)
