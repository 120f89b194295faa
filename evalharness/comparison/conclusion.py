"""The end of a run that measured: the gate's verdict, the run folder's results, the tracker."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalharness import compile_cache
from evalharness.admission import measured_job
from evalharness.comparison.measured import Measured
from evalharness.comparison.pair import Comparison
from evalharness.config import EvalConfig
from evalharness.estimates import record_job
from evalharness.evidence import run_folder, run_status, write_results
from evalharness.exit_codes import stop_if_signalled
from evalharness.gate import GateResult, check_gate
from evalharness.metric_names import (
    QUALITY_MEANINGLESS,
    QUALITY_NOTE,
    RANDOM_WEIGHTS,
    WEIGHTS,
    RunMetrics,
)
from evalharness.phases import PhaseTimes
from evalharness.tracking import description_tags

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """A finished run.

    Attributes:
        metrics: everything measured, the gate's verdict (``gate_passed``), the run folder
            (``run_dir``) and the tracker's run (``mlflow_run_id``).
        gate: the gate's verdict with one line per missed threshold.
        summary: the headline and the run folder, as printed at the end.
    """

    metrics: RunMetrics
    gate: GateResult
    summary: str


def conclude(comparison: Comparison, measured: Measured) -> Outcome:
    """Checks the gate, writes the results (``metrics.json``, the report, ``phases.json`` and
    ``time_plan.md`` with the phases so far), logs the metrics, the verdict and the folder to
    the tracker and closes its run, and marks the folder ``finished``.

    Args:
        comparison: the run's comparison stage (its config, folder, tracker and phase ledger).
        measured: what the comparison measured.
    """
    cfg, run_dir, tracker = comparison.cfg, comparison.run_dir, comparison.tracker
    cache = compile_cache.report()  # programs loaded / compiled since admission
    times = comparison.progress.ledger.snapshot(cache.from_cache)
    run_metrics = measured.metrics.with_values(
        {
            **comparison.plan.flops.as_metrics(),
            **comparison.plan.sizing.estimate.as_metrics(),
            **times.as_metrics(),
        },
        total_wall_s=times.wall_s,
        **_weights_metrics(cfg),
        **cache.as_metrics(),
    )
    write_phase_files(run_dir, comparison.plan.sizing, times)
    gate = check_gate(
        run_metrics,
        min_psnr_db=cfg.gate.min_psnr_db,
        min_speedup=cfg.gate.min_speedup,
        min_worst_frame_psnr_db=cfg.gate.min_worst_frame_psnr_db,
        on=cfg.gate.on.value,
        max_lpips=cfg.gate.max_lpips,
        psnr=cfg.gate.psnr.value,
    )
    metrics = run_metrics.with_values(gate_passed=gate.passed)
    write_results(run_dir, cfg, metrics, measured.per_pair, gate.failures)
    tracker.log_metrics(metrics.numeric())
    # The summary's first line, the headline, names no folder or run: the tracker's note uses it.
    located = metrics.with_values(run_dir=str(run_dir), mlflow_run_id=tracker.run_id)
    summary = run_folder.summary_lines(located)
    headline = summary.splitlines()[0]
    tracker.set_tags({"gate": gate.outcome, **description_tags(tracker, gate.outcome, headline)})
    # A suite's pairs upload their own folders to their child runs.
    exclude = (() if cfg.logger.log_videos else run_folder.VIDEO_PATTERNS) + ("pairs/*",)
    tracker.log_artifacts(run_dir, exclude=exclude)
    stop_if_signalled()  # the last safe point: a signal before it leaves the run killed
    tracker.finish("FINISHED")
    run_status.end_status(run_dir, run_status.FINISHED, gate_passed=gate.passed)
    return Outcome(located, gate, summary)


def _weights_metrics(cfg: EvalConfig) -> dict[str, str]:
    """On random weights, the metrics say so and mark the quality figures meaningless."""
    if not cfg.model.random_weights:
        return {}
    return {WEIGHTS: RANDOM_WEIGHTS, QUALITY_NOTE: QUALITY_MEANINGLESS}


def write_phase_files(run_dir: Path, sizing: Any, times: PhaseTimes) -> None:
    """``phases.json`` (each phase's seconds and device memory, the unaccounted seconds, the
    wall) and ``time_plan.md`` (estimate | measured | ratio per phase, then the FLOP model's
    loops and rows)."""
    (run_dir / "phases.json").write_text(json.dumps(times.as_json(), indent=2) + "\n")
    write_time_plan(run_dir, sizing, times)


def write_time_plan(run_dir: Path, sizing: Any, times: PhaseTimes | None = None) -> None:
    """``time_plan.md``: the whole job's estimate phase by phase (beside the measured phases
    when ``times`` is given), then the FLOP model's loops and rows."""
    text = (
        sizing.estimate.to_markdown(times)
        + "\nThe FLOP model's loops and rows:\n\n"
        + sizing.timing.to_markdown().rstrip()
    )
    (run_dir / "time_plan.md").write_text(text + "\n")


def finish_phases(comparison: Comparison) -> PhaseTimes:
    """At the very end of a run: ``phases.json`` and ``time_plan.md`` rewritten with every
    phase complete, the measurement added to the ``cache_dir``'s history (later estimates of
    the same job read it), and a log line of the phases against the wall. A history that
    cannot be written costs later estimates, not this run: it is logged."""
    plan = comparison.plan
    times = comparison.progress.ledger.snapshot(compile_cache.summary().from_cache)
    write_phase_files(comparison.run_dir, plan.sizing, times)
    sizing = plan.sizing
    job = measured_job(comparison.cfg, sizing.target, sizing.devices, sizing.timing, times)
    try:
        record_job(Path(comparison.cfg.cache_dir) / "phases", job)
    except OSError as err:
        log.warning(
            "the phase history in %s could not be written: %s", comparison.cfg.cache_dir, err
        )
    log.info(
        "phases: %s; unaccounted %.1f s of %.1f s (estimated %.1f s)",
        ", ".join(f"{name} {seconds:.1f} s" for name, seconds in times.seconds().items()),
        times.unaccounted_s,
        times.wall_s,
        sizing.estimate.total_s,
    )
    return times
