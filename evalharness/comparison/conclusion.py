"""The end of a run that measured: the gate's verdict, the run folder's results, the tracker."""

from __future__ import annotations

from dataclasses import dataclass

from evalharness.comparison.measured import Measured
from evalharness.comparison.pair import Comparison
from evalharness.config import EvalConfig
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
from evalharness.tracking import description_tags


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


def conclude(comparison: Comparison, measured: Measured, *, wall_s: float) -> Outcome:
    """Checks the gate, writes the results (``metrics.json``, the report), logs the metrics, the
    verdict and the folder to the tracker and closes its run, and marks the folder ``finished``.

    Args:
        comparison: the run's comparison stage (its config, folder and tracker).
        measured: what the comparison measured.
        wall_s: the run's wall time so far, admission included (``total_wall_s``).
    """
    cfg, run_dir, tracker = comparison.cfg, comparison.run_dir, comparison.tracker
    run_metrics = measured.metrics.with_values(
        comparison.plan.flops.as_metrics(), total_wall_s=wall_s, **_weights_metrics(cfg)
    )
    gate = check_gate(
        run_metrics,
        min_psnr_db=cfg.gate.min_psnr_db,
        min_speedup=cfg.gate.min_speedup,
        min_worst_frame_psnr_db=cfg.gate.min_worst_frame_psnr_db,
        on=cfg.gate.on.value,
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
