"""Wall-clock timing of compiled JAX work: compilation apart, median of warm runs."""

from __future__ import annotations

import datetime
import numbers
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import jax

from evalharness.metric_names import Metric

# Injected so tests can drive the timers with fake clocks and count the synchronisations.
Clock = Callable[[], float]
Block = Callable[[Any], Any]


@dataclass(frozen=True)
class RunTimes:
    """Seconds of repeated warm runs of one compiled computation.

    Attributes:
        runs_s: every warm run, in order.
        steps: denoising steps per run (for per-step time); 1 for non-loop work.
        timed_from: epoch seconds the first timed run started (None in older records).
        timed_until: epoch seconds the last timed run ended (None likewise).
        cpu_s: this process's CPU seconds of every run (less disturbed than wall time by other
            processes; benchmarks print it); empty when not recorded; not part of equality.
    """

    runs_s: tuple[float, ...]
    steps: int = 1
    timed_from: float | None = None
    timed_until: float | None = None
    cpu_s: tuple[float, ...] = field(default=(), compare=False)

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

    def to_json(self) -> dict[str, Any]:
        """The runs as a JSON-able dict (read back by :meth:`from_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunTimes:
        """Reads what :meth:`to_json` wrote (entries older than the wall-clock window lack it)."""
        return cls(
            tuple(data["runs_s"]),
            int(data["steps"]),
            data.get("timed_from"),
            data.get("timed_until"),
            tuple(data.get("cpu_s", ())),
        )


def check_warm_runs(warm_runs: int) -> None:
    """Refuses a timed-run count below one (a median of nothing is no timing).

    Raises:
        ValueError: ``warm_runs`` is not an integer >= 1.
    """
    # numbers.Integral admits NumPy integers from configs; bool is an int to Python but no count.
    if isinstance(warm_runs, bool) or not isinstance(warm_runs, numbers.Integral) or warm_runs < 1:
        raise ValueError(
            f"warm_runs must be >= 1 (timed runs per computation), got {warm_runs!r}; to run an "
            "arm once untimed, prepare it and do not time it"
        )


def time_interleaved(
    calls: Mapping[str, Callable[[], Any]],
    warm_runs: int,
    *,
    steps: Mapping[str, int] | None = None,
    check: Callable[[str, Any], None] = lambda name, result: None,
    clock: Clock = time.perf_counter,
    block: Block = jax.block_until_ready,
    wall_clock: Clock = time.time,
    cpu_clock: Clock = time.process_time,
    on_round: Callable[[int, Mapping[str, list[float]]], None] = lambda done, runs: None,
) -> dict[str, RunTimes]:
    """Times already-compiled, already-warm computations in round-robin rounds (every round
    timed): each round runs every computation once, in the mapping's order, so drift in the
    machine's load lands on every computation alike and ratios of their medians stay fair. The
    clock brackets the call and ``block`` on its outputs, nothing else.

    Args:
        calls: name -> zero-argument compiled call (at least one).
        warm_runs: timed runs of each computation (>= 1), i.e. the number of rounds.
        steps: name -> denoising steps per run, for the per-step figure (default 1).
        check: called with (name, result) after each timed run, outside the timed bracket; raise
            in it to stop (e.g. on non-finite latents).
        clock: monotonic seconds for the run durations.
        block: waits for every output array of a run (else the clock stops at dispatch).
        wall_clock: epoch seconds for each computation's timed window.
        cpu_clock: this process's CPU seconds.
        on_round: called after each round (untimed) with the number of finished rounds and
            every computation's run seconds so far, so a long benchmark can print each round.

    Returns:
        name -> its run times, in the order of ``calls``.

    Raises:
        ValueError: ``warm_runs`` < 1 or no calls.
    """
    check_warm_runs(warm_runs)
    if not calls:
        raise ValueError("nothing to time: no computations were given")
    runs: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    first_start: dict[str, float] = {}
    last_end: dict[str, float] = {}
    for done in range(1, warm_runs + 1):
        for name, call in calls.items():
            # The wall-clock and CPU-clock reads sit outside the timed bracket.
            if name not in first_start:
                first_start[name] = wall_clock()
            cpu_start = cpu_clock()
            start = clock()
            result = call()
            block(result)
            runs[name].append(clock() - start)
            cpu[name].append(cpu_clock() - cpu_start)
            last_end[name] = wall_clock()
            check(name, result)
        on_round(done, runs)
    steps = steps or {}
    return {
        name: RunTimes(
            tuple(runs[name]),
            steps.get(name, 1),
            first_start[name],
            last_end[name],
            tuple(cpu[name]),
        )
        for name in calls
    }


class TimedArm(Protocol):
    """What the timing metrics read from an arm (``evalharness.arms.arm.ArmResult`` fits)."""

    label: str
    times: RunTimes | None
    compile_s: float
    warmup_s: float
    decode_s: float


def timing_metrics(
    dense: TimedArm,
    sparse: TimedArm,
    noise_floor: TimedArm | None = None,
    *,
    executors: dict[str, str] | None = None,
) -> dict[str, float]:
    """Every timed arm's metrics (``<label>_{median,min,max,per_step}_s``,
    ``{compile,warmup,decode}_<label>_s``) and the speedups of the sparse arm.

    Each timed dense arm is a dense control; ``speedup`` (the headline the gate reads) is the
    fastest control's median over the sparse median, so a sparse kernel is never credited for
    beating a slow dense one. ``speedup_vs_<executor>`` is the ratio against each control;
    ``speedup_vs_dense_arm`` is the kernel effect (our dense arm's executor against our sparse
    arm: B0 on the accelerators, ``xla_flash`` on a CPU).

    Args:
        dense: the dense arm (timed).
        sparse: the sparse arm (timed).
        noise_floor: the second dense arm; a dense control too when it was timed.
        executors: arm label ("dense", "noise_floor") -> dense executor name; without it the
            controls are named by their arm label.

    Returns:
        Flat metrics, including ``speedup``, ``speedup_vs_<name>`` per control and
        ``dense_controls`` (how many were timed).

    Raises:
        ValueError: the dense or the sparse arm was not timed.
    """
    arms = [dense, sparse] + ([noise_floor] if noise_floor and noise_floor.times else [])
    metrics: dict[str, float] = {}
    for arm in arms:
        if arm.times is None:
            raise ValueError(f"the {arm.label} arm has no warm-run timings")
        for name in ("median_s", "min_s", "max_s", "per_step_s"):
            metrics[f"{arm.label}_{name}"] = getattr(arm.times, name)
        for name in ("compile", "warmup", "decode"):
            metrics[f"{name}_{arm.label}_s"] = getattr(arm, f"{name}_s")
    names = executors or {}
    controls = {names.get(arm.label, arm.label): arm for arm in arms if arm is not sparse}
    sparse_s = sparse.times.median_s
    for name, arm in controls.items():
        metrics[f"speedup_vs_{name}"] = arm.times.median_s / sparse_s
    metrics["speedup_vs_dense_arm"] = dense.times.median_s / sparse_s
    metrics[Metric.SPEEDUP] = min(arm.times.median_s for arm in controls.values()) / sparse_s
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


def timed_window_tags(arms: Iterable[Any]) -> dict[str, str]:
    """``timed.<label>``: the UTC window of each arm's timed runs ("<first start> / <last end>"),
    for arms with ``label`` and ``times`` (None entries and arms without a window are skipped)."""
    tags = {}
    for arm in arms:
        times = getattr(arm, "times", None)
        if times is None or times.timed_from is None:
            continue
        window = [t for t in (times.timed_from, times.timed_until) if t is not None]
        tags[f"timed.{arm.label}"] = " / ".join(
            datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")
            for t in window
        )
    return tags
