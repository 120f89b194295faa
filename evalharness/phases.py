"""The phases of a run: one list of names that the run times, the progress line shows,
``phases.json``, ``metrics.json`` and MLflow record, and the time estimate predicts.

A :class:`PhaseLedger` is the run's stopwatch: each call site wraps its own work in
``ledger.timed(phase)``; the seconds of a phase entered several times (a suite's pairs, the
three arms' decodes) add up. Whatever no call site wrapped is ``unaccounted`` (the wall minus
the sum of the phases), so a phase nobody listed shows as a number, not as nothing. At the end
of each phase the ledger reads the device's memory as the runtime reports it (TPU and GPU: bytes
in use and the process's high-water mark; a CPU reports nothing).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import jax


class Phase(enum.StrEnum):
    """A phase of a run, in the order a run passes through them.

    Members:
        PREFLIGHT: admission: the config pinned, the plans, the checks and compiles it makes.
        TRACKING: the run folder and the tracker's run opened, the config and plans logged.
        WEIGHTS: the transformer, prompt encoder and VAE built (drawn, or read from a
            checkpoint).
        PROMPTS: the prompts encoded (or read from the embedding cache) and the noise drawn.
        DENSE_COMPILE, SPARSE_COMPILE, NOISE_FLOOR_COMPILE: an arm's denoising loop compiled.
        DENSE_WARMUP, NOISE_FLOOR_WARMUP: an arm's first, untimed run.
        SPARSE_WARMUP: the sparse arm's first, untimed run, which records the routing
            statistics.
        TIMING: the interleaved timed rounds.
        VAE_COMPILE: the VAE decoder compiled (once per run).
        DECODE: latents decoded to frames (and the dense-arm cache read or written).
        QUALITY: PSNR, SSIM, FFmpeg's PSNR and the codec noise.
        VIDEOS: the videos, plots and per-pair files written.
        LOGGING: results, the report and the tracker's upload at the end.
    """

    PREFLIGHT = "preflight"
    TRACKING = "tracking"
    WEIGHTS = "weights"
    PROMPTS = "prompts"
    DENSE_COMPILE = "dense compile"
    DENSE_WARMUP = "dense warm-up"
    SPARSE_COMPILE = "sparse compile"
    SPARSE_WARMUP = "sparse warm-up"
    NOISE_FLOOR_COMPILE = "noise_floor compile"
    NOISE_FLOOR_WARMUP = "noise_floor warm-up"
    TIMING = "timing"
    VAE_COMPILE = "VAE compile"
    DECODE = "decode"
    QUALITY = "quality"
    VIDEOS = "videos"
    LOGGING = "logging"

    @property
    def metric(self) -> str:
        """The metric of its seconds: ``phase_dense_compile_s``."""
        return f"phase_{re.sub(r'[^a-z0-9]+', '_', self.value.lower()).strip('_')}_s"


# The row of the whole run's figures beside the phases.
UNACCOUNTED = "unaccounted"
UNACCOUNTED_METRIC = "phase_unaccounted_s"
WALL_METRIC = "wall_s"


def compile_phase(arm: str) -> Phase:
    """The compile phase of an arm (``dense``, ``sparse``, ``noise_floor``)."""
    return Phase(f"{arm} compile")


def warmup_phase(arm: str) -> Phase:
    """The warm-up phase of an arm (``dense``, ``sparse``, ``noise_floor``)."""
    return Phase(f"{arm} warm-up")


@dataclass(frozen=True)
class PhaseMemory:
    """Device memory as the runtime reports it at the end of a phase.

    Attributes:
        in_use_bytes: bytes in use on the first local device.
        peak_bytes: the process's high-water mark so far (the runtime keeps no per-phase peak,
            so a phase's own peak is this figure where it rose during the phase).
    """

    in_use_bytes: int
    peak_bytes: int


def device_memory() -> PhaseMemory | None:
    """The first local device's memory, or None where the runtime reports none (a CPU)."""
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # a backend without the query: nothing reported, nothing to record
        return None
    if not stats or "bytes_in_use" not in stats:
        return None
    in_use = int(stats["bytes_in_use"])
    return PhaseMemory(in_use, int(stats.get("peak_bytes_in_use", in_use)))


@dataclass
class PhaseRecord:
    """One phase's total.

    Attributes:
        seconds: wall seconds inside the phase, every entry added.
        entries: how many times it was entered.
        memory: device memory at its last exit (None: not reported).
    """

    seconds: float = 0.0
    entries: int = 0
    memory: PhaseMemory | None = None


@dataclass(frozen=True)
class PhaseTimes:
    """A run's phases, measured: what ``phases.json`` holds.

    Attributes:
        phases: phase -> its record, in the order of :class:`Phase`, entered phases only.
        wall_s: seconds from the ledger's start to the snapshot.
        cache_hits: compiled programs taken from the persistent compilation cache (None: not
            counted).
    """

    phases: Mapping[Phase, PhaseRecord]
    wall_s: float
    cache_hits: int | None = None

    @property
    def accounted_s(self) -> float:
        """Seconds inside some phase."""
        return sum(record.seconds for record in self.phases.values())

    @property
    def unaccounted_s(self) -> float:
        """The wall minus the phases: time no call site claimed."""
        return self.wall_s - self.accounted_s

    def seconds(self) -> dict[str, float]:
        """Phase name -> seconds (entered phases only)."""
        return {phase.value: record.seconds for phase, record in self.phases.items()}

    def as_metrics(self) -> dict[str, float]:
        """One metric per phase (``phase_<name>_s``), the unaccounted seconds and the wall."""
        metrics = {phase.metric: record.seconds for phase, record in self.phases.items()}
        for phase, record in self.phases.items():
            if record.memory is not None:
                metrics[phase.metric[:-2] + "_peak_gib"] = record.memory.peak_bytes / 2**30
        metrics[UNACCOUNTED_METRIC] = self.unaccounted_s
        metrics[WALL_METRIC] = self.wall_s
        return metrics

    def as_json(self) -> dict:
        """The ``phases.json`` document."""
        return {
            "wall_s": self.wall_s,
            "unaccounted_s": self.unaccounted_s,
            "phases": {
                phase.value: {
                    "seconds": record.seconds,
                    "entries": record.entries,
                    "in_use_bytes": None if record.memory is None else record.memory.in_use_bytes,
                    "peak_bytes": None if record.memory is None else record.memory.peak_bytes,
                }
                for phase, record in self.phases.items()
            },
        }


@dataclass
class PhaseLedger:
    """The run's stopwatch (see the module docstring).

    Args:
        clock: monotonic seconds (tests inject one).
        memory: reads the device's memory at each phase's end (tests inject one).
        on_enter: called with each phase as it starts (the progress line).
    """

    clock: Callable[[], float] = time.perf_counter
    memory: Callable[[], PhaseMemory | None] = device_memory
    on_enter: Callable[[Phase], None] = lambda phase: None
    started: float = field(init=False)
    records: dict[Phase, PhaseRecord] = field(init=False, default_factory=dict)
    current: Phase | None = field(init=False, default=None)
    _entered_at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @contextmanager
    def timed(self, phase: Phase) -> Iterator[None]:
        """Times the enclosed work as ``phase``; a phase inside another is refused (each second
        belongs to one phase).

        Raises:
            RuntimeError: a phase is already running.
        """
        if self.current is not None:
            raise RuntimeError(f"phase {phase.value!r} started inside {self.current.value!r}")
        self.on_enter(phase)
        self.current = phase
        self._entered_at = start = self.clock()
        try:
            yield
        finally:
            record = self.records.setdefault(phase, PhaseRecord())
            record.seconds += self.clock() - start
            record.entries += 1
            record.memory = self.memory()
            self.current = None

    def snapshot(self, cache_hits: int | None = None) -> PhaseTimes:
        """The phases so far (a running phase with its seconds so far) and the wall since the
        ledger started."""
        now = self.clock()
        records = {p: dataclasses.replace(r) for p, r in self.records.items()}
        if self.current is not None:
            running = records.setdefault(self.current, PhaseRecord())
            running.seconds += now - self._entered_at
            running.entries += 1
        ordered = {p: records[p] for p in Phase if p in records}
        return PhaseTimes(ordered, now - self.started, cache_hits)
