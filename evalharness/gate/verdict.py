"""Quality/speed gate: thresholds on PSNR and speedup turned into a process exit code.

The PSNR thresholds read the raw-frame PSNR of sparse vs dense (``psnr_db``,
``psnr_worst_frame_db``), not FFmpeg's PSNR of lossy encodes, whose codec noise would swamp the
attention error. Over a prompt suite each threshold reads one statistic across pairs (``gate.on``,
``--on``): ``mean``, ``lcb`` (the lower bound of its 95% bootstrap interval) or ``worst``, e.g.
``psnr_db_lcb``. A speedup threshold never passes on a run whose dense medians were reused from
another process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from evalharness.evidence import statistic_name
from evalharness.metric_names import Metric

# Runs logged before ``psnr_db`` existed carry the same figure (raw frames, from the mean squared
# error over the video) as ``psnr_video_db``; the gate reads it there.
_OLDER_NAMES = {Metric.PSNR_DB: Metric.PSNR_VIDEO_DB}


@dataclass(frozen=True)
class GateResult:
    """Outcome of a gate check: ``passed``, one line per failed threshold, and whether any
    threshold was set (a run with none is "not gated": it passes, but nothing was checked)."""

    passed: bool
    failures: tuple[str, ...]
    gated: bool = True

    @property
    def exit_code(self) -> int:
        """0 when every threshold was met (or none was set), else 1."""
        return 0 if self.passed else 1

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` or ``not gated``: the run's ``gate`` tag."""
        if not self.gated:
            return "not gated"
        return "passed" if self.passed else "failed"


def check_gate(
    metrics: Mapping[str, float],
    *,
    min_psnr_db: float | None,
    min_speedup: float | None,
    min_worst_frame_psnr_db: float | None = None,
    on: str = "mean",
) -> GateResult:
    """Compares run metrics with the thresholds; a None threshold is not checked.

    Args:
        metrics: the run's metrics (``psnr_video_db`` stands in for ``psnr_db`` of older runs).
        min_psnr_db: lowest acceptable raw-frame PSNR of sparse vs dense (``psnr_db``), in dB.
        min_speedup: lowest acceptable dense median / sparse median.
        min_worst_frame_psnr_db: lowest acceptable PSNR of the worst frame, in dB.
        on: the statistic across a suite's pairs each threshold reads: ``mean``, ``lcb`` or
            ``worst`` (``<metric>_<on>``; for ``mean``, runs without it are read at ``<metric>``).

    Returns:
        The result; each failure names the metric, its value and the threshold. A missing or NaN
        metric, or a NaN or infinite threshold, fails; an infinite metric (identical frames)
        passes a finite threshold.
    """
    statistic_name(Metric.PSNR_DB, on)  # refuses an unknown statistic before anything is read
    failures = []
    if min_speedup is not None and metrics.get(Metric.DENSE_TIMING_REUSED):
        failures.append(
            f"{Metric.SPEEDUP}: the dense medians were reused from another process "
            "(reuse_dense_timing=true), so no speedup threshold can pass; rerun without "
            "reuse_dense_timing to time dense and sparse side by side"
        )
    for name, threshold in (
        (Metric.PSNR_DB, min_psnr_db),
        (Metric.PSNR_WORST_FRAME_DB, min_worst_frame_psnr_db),
        (Metric.SPEEDUP, min_speedup),
    ):
        if threshold is None:
            continue
        if statistic_name(name, on) in metrics or on != "mean":
            name = statistic_name(name, on)
        label = name
        if name not in metrics and _OLDER_NAMES.get(name) in metrics:
            label = f"{name} (as {_OLDER_NAMES[name]})"
            name = _OLDER_NAMES[name]
        if name not in metrics:
            failures.append(f"{label} is missing from the run's metrics (threshold {threshold})")
            continue
        value = float(metrics[name])
        if not math.isfinite(threshold):  # NaN compares false: it would pass every value
            failures.append(f"{label}: the threshold {threshold} is not a finite number")
        elif not value >= threshold:  # a NaN value is never at or above a threshold
            failures.append(f"{label} = {value:.4g} is below the threshold {threshold:.4g}")
    gated = any(t is not None for t in (min_psnr_db, min_worst_frame_psnr_db, min_speedup))
    return GateResult(not failures, tuple(failures), gated)
