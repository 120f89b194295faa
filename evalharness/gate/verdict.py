"""Quality/speed gate: thresholds on PSNR, LPIPS and speedup turned into a process exit code.

The PSNR thresholds read the raw-frame PSNR of sparse vs dense (``psnr_db``,
``psnr_worst_frame_db``), not FFmpeg's PSNR of lossy encodes, whose codec noise would swamp the
attention error. Over a prompt suite each threshold reads one statistic across pairs (``gate.on``,
``--on``): ``mean``, ``lcb`` (the lower bound of its 95% bootstrap interval) or ``worst``, e.g.
``psnr_db_lcb``. A speedup threshold never passes on a run whose dense medians were reused from
another process. ``max_lpips`` is an upper bound (LPIPS is a distance: its ``lcb`` statistic is the
interval's upper end, ``lpips_ucb``). ``psnr`` picks the PSNR convention ``min_psnr_db`` reads:
``video`` (``psnr_db``, from the mean squared error over the video) or ``frames``
(``psnr_frames_db``, the mean of per-frame PSNRs, as Sparse VideoGen reports it).
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
# ``gate.psnr``: the PSNR convention ``min_psnr_db`` reads, and its metric.
PSNR_CONVENTIONS = {"video": Metric.PSNR_DB, "frames": Metric.PSNR_FRAMES_DB}


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
    max_lpips: float | None = None,
    psnr: str = "video",
) -> GateResult:
    """Compares run metrics with the thresholds; a None threshold is not checked.

    Args:
        metrics: the run's metrics (``psnr_video_db`` stands in for ``psnr_db`` of older runs).
        min_psnr_db: lowest acceptable raw-frame PSNR of sparse vs dense (``psnr_db``), in dB.
        min_speedup: lowest acceptable dense median / sparse median.
        min_worst_frame_psnr_db: lowest acceptable PSNR of the worst frame, in dB.
        on: the statistic across a suite's pairs each threshold reads: ``mean``, ``lcb`` or
            ``worst`` (``<metric>_<on>``; for ``mean``, runs without it are read at ``<metric>``).
        max_lpips: highest acceptable mean per-frame LPIPS of sparse vs dense.
        psnr: which PSNR ``min_psnr_db`` reads: ``video`` (``psnr_db``) or ``frames``
            (``psnr_frames_db``).

    Returns:
        The result; each failure names the metric, its value and the threshold. A missing or NaN
        metric, or a NaN or infinite threshold, fails; an infinite metric (identical frames)
        passes a finite threshold.
    """
    statistic_name(Metric.PSNR_DB, on)  # refuses an unknown statistic before anything is read
    if psnr not in PSNR_CONVENTIONS:
        raise ValueError(f"gate.psnr={psnr!r}: use {' or '.join(PSNR_CONVENTIONS)}")
    failures = []
    if min_speedup is not None and metrics.get(Metric.DENSE_TIMING_REUSED):
        failures.append(
            f"{Metric.SPEEDUP}: the dense medians were reused from another process "
            "(reuse_dense_timing=true), so no speedup threshold can pass; rerun without "
            "reuse_dense_timing to time dense and sparse side by side"
        )
    for name, threshold, upper in (
        (PSNR_CONVENTIONS[psnr], min_psnr_db, False),
        (Metric.PSNR_WORST_FRAME_DB, min_worst_frame_psnr_db, False),
        (Metric.LPIPS, max_lpips, True),
        (Metric.SPEEDUP, min_speedup, False),
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
        failure = _missed(label, float(metrics[name]), threshold, upper)
        if failure:
            failures.append(failure)
    gated = any(
        t is not None for t in (min_psnr_db, min_worst_frame_psnr_db, max_lpips, min_speedup)
    )
    return GateResult(not failures, tuple(failures), gated)


def _missed(label: str, value: float, threshold: float, upper: bool) -> str | None:
    """The failure line of a value against a lower (or, with ``upper``, an upper) threshold; None
    when it is met. A NaN value or threshold never meets one."""
    if not math.isfinite(threshold):  # NaN compares false: it would pass every value
        return f"{label}: the threshold {threshold} is not a finite number"
    if upper and not value <= threshold:
        return f"{label} = {value:.4g} is above the threshold {threshold:.4g}"
    if not upper and not value >= threshold:
        return f"{label} = {value:.4g} is below the threshold {threshold:.4g}"
    return None
