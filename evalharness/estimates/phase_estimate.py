"""The whole job's time, phase by phase, from the latest measurement of the same job.

A run's phases (``evalharness.phases.Phase``) are estimated one by one:

1. **measured**: the latest measurement of the same phase on the same kind of device, device
   count, model and video (frames, height, width), scaled by its work: by the FLOP model's
   ratio where the FLOP model has a figure for the phase then and now (a loop's steps, runs,
   schedule), else by the phase's work units (:class:`JobWork`: steps, timed runs, pairs,
   arms, frames). On a CPU the figure is also scaled by the hosts' measured matmul rates. A
   compile with the compilation cache warm for this job is estimated from a warm measurement
   where one exists.
2. **FLOP model**: where nothing was measured, the FLOP model's row for the phase
   (``workload``, ``run_time``; ``TimeEstimate``), labelled so.
3. **not estimated**: a phase neither knows (the run's own bookkeeping on a new device): 0 s,
   and the estimate says how many phases it left out.

Measurements come from two places: the ``phases/`` folder of the run's ``cache_dir`` (every
finished run adds its ``MeasuredJob``) and the measurements shipped with the package
(``evalharness/estimates/measured_jobs/``, what a lent TPU v5e measured). The latest wins.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalharness.estimates.workload import TimeEstimate
from evalharness.formatting import markdown_table
from evalharness.phases import Phase, PhaseTimes, compile_phase, warmup_phase

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).parent / "measured_jobs"
MEASURED, FLOP_MODEL, NOT_ESTIMATED = "measured", "FLOP model", "not estimated"
# The phases whose cost is the compiler's: a warm compilation cache makes them fast.
COMPILES = frozenset(p for p in Phase if p.value.endswith("compile"))


@dataclass(frozen=True)
class JobKey:
    """What must match for a measurement to stand for a job's phases.

    Attributes:
        device: the kind of device (``tpu-v5e``, ``cpu``, ``h200``...).
        devices: how many.
        model: the model preset.
        video: frames, height, width.
    """

    device: str
    devices: int
    model: str
    video: tuple[int, int, int]


@dataclass(frozen=True)
class JobWork:
    """The work units of a job that scale its phases (see :func:`phase_units`).

    Attributes:
        steps: denoising steps.
        warm_runs: timed rounds.
        pairs: (prompt, seed) pairs.
        prompts: distinct prompts encoded.
        arms: the arms that run (``dense``, ``sparse``, ``noise_floor``).
        frames: video frames.
    """

    steps: int
    warm_runs: int
    pairs: int
    prompts: int
    arms: tuple[str, ...]
    frames: int


def phase_units(work: JobWork) -> dict[Phase, float]:
    """Each phase's work units: what doubling doubles it. Compiles, weights and bookkeeping
    are once per run; an arm's warm-up is a loop per pair; the timing every arm's loop per
    round and pair; decodes, videos and quality measures per arm, pair and frame."""
    units = dict.fromkeys(Phase, 1.0)
    units[Phase.PROMPTS] = float(work.prompts)
    for arm in work.arms:
        units[warmup_phase(arm)] = float(work.steps * work.pairs)
    units[Phase.TIMING] = float(work.steps * work.warm_runs * work.pairs * len(work.arms))
    units[Phase.DECODE] = float(work.pairs * len(work.arms))
    units[Phase.VIDEOS] = float(work.pairs * len(work.arms) * work.frames)
    units[Phase.QUALITY] = float(work.pairs * (len(work.arms) - 1) * work.frames)
    return units


def flop_model_phases(timing: TimeEstimate, work: JobWork) -> dict[Phase, float]:
    """The FLOP model's seconds per phase: its loops split into each arm's warm-up (one run
    per pair) and the timed rounds, and its rows outside the loops put in their phases."""
    arms = [arm for arm in work.arms if arm in timing.runs]
    pairs = timing.pairs
    out = {warmup_phase(arm): pairs * timing.loop_seconds(arm) for arm in arms}
    out[Phase.TIMING] = pairs * work.warm_runs * sum(timing.loop_seconds(a) for a in arms)
    rows = {
        "weight loading": Phase.WEIGHTS,
        "text encoding": Phase.PROMPTS,
        "VAE decode": Phase.DECODE,
        "host: encode": Phase.VIDEOS,
        "host: side by side": Phase.VIDEOS,
        "host: measure": Phase.QUALITY,
    }
    for row, phase in rows.items():
        out[phase] = out.get(phase, 0.0) + sum(timing.once.get(row, {}).values())
    compiled = timing.once.get("compile", {})
    for arm in arms:
        out[compile_phase(arm)] = compiled.get(arm, 0.0)
    if "shared" in compiled:
        out[Phase.VAE_COMPILE] = compiled["shared"]
    return {phase: seconds for phase, seconds in out.items() if seconds > 0}


@dataclass(frozen=True)
class MeasuredJob:
    """One finished run's phases, as the history keeps them.

    Attributes:
        key: the job it measured.
        work: its work units.
        phases: phase name -> seconds.
        model_phases: phase name -> the FLOP model's seconds for the same job.
        wall_s: the run's wall.
        created_at: seconds since the epoch.
        flops_per_s: the host's measured matmul rate (a CPU's figures scale by it).
        cache_hits: programs taken from the compilation cache (0: a cold cache).
        schedule: the sparse arm's schedule.
    """

    key: JobKey
    work: JobWork
    phases: Mapping[str, float]
    model_phases: Mapping[str, float]
    wall_s: float
    created_at: float
    flops_per_s: float
    cache_hits: int = 0
    schedule: str = ""

    def as_json(self) -> dict:
        """The JSON document of the history."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: dict) -> MeasuredJob:
        """Reads :meth:`as_json`'s document.

        Raises:
            KeyError, TypeError, ValueError: a document of another shape.
        """
        key, work = raw["key"], raw["work"]
        return cls(
            JobKey(key["device"], key["devices"], key["model"], tuple(key["video"])),
            JobWork(**{**work, "arms": tuple(work["arms"])}),
            **{k: v for k, v in raw.items() if k not in ("key", "work")},
        )


def load_history(folders: Iterable[Path]) -> list[MeasuredJob]:
    """Every readable measurement in ``folders`` (``*.json``); an unreadable file is skipped
    with a warning (a damaged history costs an estimate, never a run)."""
    jobs = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else ():
            try:
                jobs.append(MeasuredJob.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError) as err:
                log.warning("time estimate: skipping the measurement %s (%s)", path, err)
    return jobs


def record_job(folder: Path, job: MeasuredJob) -> Path:
    """Adds ``job`` to the history in ``folder`` (one file per run, written whole)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{job.key.model}-{id(job):x}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job.as_json(), indent=1))
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class PhaseEstimate:
    """One phase's estimate.

    Attributes:
        phase: the phase.
        seconds: its estimate.
        source: :data:`MEASURED`, :data:`FLOP_MODEL` or :data:`NOT_ESTIMATED`.
        detail: where the figure comes from, in words.
    """

    phase: Phase
    seconds: float
    source: str
    detail: str = ""


@dataclass(frozen=True)
class JobEstimate:
    """The whole job's estimate, phase by phase (module docstring)."""

    phases: tuple[PhaseEstimate, ...] = field(default_factory=tuple)

    @property
    def total_s(self) -> float:
        """The whole job's seconds."""
        return sum(p.seconds for p in self.phases)

    @property
    def total_minutes(self) -> float:
        """The whole job's minutes."""
        return self.total_s / 60.0

    def of(self, phase: Phase) -> PhaseEstimate | None:
        """The estimate of ``phase``, or None when the job has no such phase."""
        return next((p for p in self.phases if p.phase is phase), None)

    def summary(self) -> str:
        """``12.3 min (9 phases measured, 4 from the FLOP model, 2 not estimated)``."""
        counts = {s: sum(p.source == s for p in self.phases) for s in (MEASURED, FLOP_MODEL)}
        missing = sum(p.source == NOT_ESTIMATED for p in self.phases)
        parts = [f"{counts[MEASURED]} phases measured", f"{counts[FLOP_MODEL]} from the FLOP model"]
        if missing:
            parts.append(f"{missing} not estimated")
        return f"{self.total_minutes:,.1f} min ({', '.join(parts)})"

    def to_markdown(self, measured: PhaseTimes | None = None) -> str:
        """Estimate | measured | ratio per phase (measured columns when ``measured`` is given),
        then the whole job and each estimate's source."""
        seconds = {} if measured is None else measured.seconds()
        rows = []
        for p in self.phases:
            row = {"phase": p.phase.value, "estimate": p.seconds, "source": p.source}
            if measured is not None:
                got = seconds.get(p.phase.value)
                row |= {"measured": got, "ratio": _ratio(got, p.seconds)}
            rows.append(row)
        total = {"phase": "**whole job**", "estimate": self.total_s, "source": ""}
        if measured is not None:
            rows.append({"phase": UNACCOUNTED_ROW, "measured": measured.unaccounted_s})
            total |= {"measured": measured.wall_s, "ratio": _ratio(measured.wall_s, self.total_s)}
        rows.append(total)
        columns = [("phase", "phase", "{}"), ("estimate (s)", "estimate", "{:,.1f}")]
        if measured is not None:
            columns += [
                ("measured (s)", "measured", "{:,.1f}"),
                ("measured / estimate", "ratio", "{:.2f}"),
            ]
        columns.append(("source", "source", "{}"))
        notes = "".join(f"\n- {p.phase.value}: {p.detail}" for p in self.phases if p.detail)
        return f"{markdown_table(rows, columns)}\n\nWhole job: {self.summary()}.{notes}\n"

    def as_metrics(self) -> dict[str, float]:
        """``estimate_wall_s`` and ``estimate_<phase>_s`` per phase."""
        out = {"estimate_" + p.phase.metric.removeprefix("phase_"): p.seconds for p in self.phases}
        return {**out, "estimate_wall_s": self.total_s}


UNACCOUNTED_ROW = "unaccounted (no phase)"


def _ratio(measured: float | None, estimate: float) -> float | None:
    return None if measured is None or estimate <= 0 else measured / estimate


def estimate_job(
    key: JobKey,
    work: JobWork,
    model: Mapping[Phase, float],
    history: Iterable[MeasuredJob],
    *,
    flops_per_s: float,
    warm_cache: bool,
) -> JobEstimate:
    """Every phase of the job ``key`` doing ``work``: measured, else the FLOP model's figure
    (``model``), else not estimated (module docstring).

    Args:
        key: the job.
        work: its work units.
        model: the FLOP model's seconds per phase (:func:`flop_model_phases`).
        history: measurements (:func:`load_history`).
        flops_per_s: this host's measured matmul rate.
        warm_cache: the compilation cache already holds this job's programs.
    """
    same = sorted((j for j in history if j.key == key), key=lambda j: j.created_at)
    units = phase_units(work)
    phases = [p for p in Phase if p in units and (_runs(p, work))]
    out = []
    for phase in phases:
        found = _latest_for(phase, same, warm_cache)
        if found is not None:
            out.append(_scaled(phase, found, work, model, units, flops_per_s, key.device))
        elif phase in model:
            out.append(PhaseEstimate(phase, model[phase], FLOP_MODEL))
        else:
            out.append(PhaseEstimate(phase, 0.0, NOT_ESTIMATED))
    return JobEstimate(tuple(out))


def _runs(phase: Phase, work: JobWork) -> bool:
    """Whether the job has ``phase`` at all (an arm's phases only where the arm runs)."""
    for arm in ("dense", "sparse", "noise_floor"):
        if phase in (compile_phase(arm), warmup_phase(arm)):
            return arm in work.arms
    return True


def _latest_for(phase: Phase, jobs: list[MeasuredJob], warm_cache: bool) -> MeasuredJob | None:
    """The latest measurement of ``phase``; for a compile, only one whose compilation cache was
    in the same state (a cold compile is not estimated from a warm one, nor the reverse)."""
    measured = [j for j in jobs if phase.value in j.phases]
    if phase in COMPILES:
        measured = [j for j in measured if (j.cache_hits > 0) == warm_cache]
    return measured[-1] if measured else None


def _scaled(
    phase: Phase,
    job: MeasuredJob,
    work: JobWork,
    model: Mapping[Phase, float],
    units: Mapping[Phase, float],
    flops_per_s: float,
    device: str,
) -> PhaseEstimate:
    """``job``'s measurement of ``phase`` scaled to this job (module docstring)."""
    seconds = job.phases[phase.value]
    then_model = job.model_phases.get(phase.value, 0.0)
    if then_model > 0 and model.get(phase, 0.0) > 0:
        factor, by = model[phase] / then_model, "the FLOP model's ratio"
    else:
        then_units = phase_units(job.work).get(phase, 1.0)
        factor, by = units[phase] / then_units, "its work units"
    if device == "cpu" and job.flops_per_s > 0 and flops_per_s > 0:
        factor *= job.flops_per_s / flops_per_s
        by += " and the hosts' matmul rates"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(job.created_at))
    detail = f"{seconds:,.1f} s measured {when}"
    if abs(factor - 1.0) > 1e-9:
        detail += f", x{factor:.3g} by {by}"
    return PhaseEstimate(phase, seconds * factor, MEASURED, detail)
