"""The report's first section: one sentence per schedule and a small verdict table.

Each harness run is read against the thresholds in force for it (its params ``gate.min_psnr_db``,
``gate.min_worst_frame_psnr_db``, ``gate.min_speedup`` and ``gate.on``). A run with no threshold
set is "not gated", never "passed", whatever its ``gate`` tag says: runs logged before the
harness tagged ``gate=not gated`` carry ``gate=passed`` although nothing was checked.

The comparison is repeated here (rather than imported from ``evalharness.gate``, which the
reports package may not read) so that a failed run can say by how much it missed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evalharness.formatting import format_cell, markdown_code, markdown_text
from evalharness.metric_names import Metric
from reports.sources import ReportRun
from reports.tables import Table

PASSED, FAILED, NOT_GATED = "passed", "failed", "not gated"
WORTH_IT = "worth it at these thresholds"
NOTHING_GATED = "no thresholds set: nothing gated"
# Gated metric -> (the param holding its threshold, words for it in a verdict, unit, format).
GATED = {
    Metric.SPEEDUP: ("gate.min_speedup", Metric.SPEEDUP, "x", "{:.2f}"),
    Metric.PSNR_DB: ("gate.min_psnr_db", "PSNR", " dB", "{:.2f}"),
    Metric.PSNR_WORST_FRAME_DB: (
        "gate.min_worst_frame_psnr_db",
        "worst-frame PSNR",
        " dB",
        "{:.2f}",
    ),
}
# Runs logged before ``psnr_db`` existed carry the same figure as ``psnr_video_db``.
_OLDER_NAMES = {Metric.PSNR_DB: Metric.PSNR_VIDEO_DB}
_UNSET = ("", "none", "null", "nan")
# MLflow stores an infinite metric (identical videos) as the largest float.
_MLFLOW_INF = 1e300


def _number(value: Any) -> float | None:
    """A param's value as a float, or None when it is unset ("None", "null", empty, NaN)."""
    if value is None or str(value).strip().lower() in _UNSET:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def thresholds(run: ReportRun) -> dict[str, float]:
    """Gated metric -> threshold, for the thresholds set on ``run`` (empty when none is)."""
    out = {}
    for metric, (param, *_) in GATED.items():
        value = _number(run.params.get(param))
        if value is not None:
            out[metric] = value
    return out


def _statistic(run: ReportRun) -> str:
    """The statistic of a suite the thresholds read (``gate.on``), e.g. ``mean``."""
    return str(run.params.get("gate.on", "mean")).rsplit(".", 1)[-1] or "mean"


def gated_value(run: ReportRun, metric: str) -> float | None:
    """The value the gate compares with ``metric``'s threshold, as ``evalharness.gate`` reads it:
    ``<metric>_<gate.on>`` over a suite (``<metric>`` itself for one pair under ``mean``)."""
    on = _statistic(run)
    names = [f"{metric}_{on}"] if on != "mean" else [f"{metric}_mean", metric]
    names += [_OLDER_NAMES[metric]] if metric in _OLDER_NAMES else []
    for name in names:
        if name in run.metrics:
            value = float(run.metrics[name])
            return math.inf if value > _MLFLOW_INF else value
    return None


def gate_outcome(run: ReportRun) -> str:
    """``passed``, ``failed`` or ``not gated``.

    The thresholds in the run's params decide "not gated" when they were logged (older runs say
    ``gate=passed`` with none set); otherwise the run's own ``gate`` tag, then its ``gate_passed``
    metric, say what the harness decided.
    """
    logged = any(param in run.params for param, *_ in GATED.values())
    if logged and not thresholds(run):
        return NOT_GATED
    tag = run.tags.get("gate")
    if tag in (PASSED, FAILED, NOT_GATED):
        return tag
    if "gate_passed" in run.metrics:
        return PASSED if run.metrics["gate_passed"] else FAILED
    return NOT_GATED


def _miss(run: ReportRun, metric: str, threshold: float) -> str | None:
    """How ``run`` misses ``metric``'s threshold ("worst-frame PSNR by 0.75 dB"), or None."""
    _, words, unit, fmt = GATED[metric]
    value = gated_value(run, metric)
    if metric == Metric.SPEEDUP and run.metrics.get(Metric.DENSE_TIMING_REUSED):
        return "speedup (dense timings reused from another process: not comparable)"
    if value is None or math.isnan(value):
        return f"{words} (not measured)"
    if value < threshold:
        return f"{words} by {fmt.format(threshold - value)}{unit}"
    return None


def shortfalls(run: ReportRun) -> list[str]:
    """One phrase per threshold ``run`` misses, e.g. "worst-frame PSNR by 0.75 dB"."""
    missed = (_miss(run, metric, limit) for metric, limit in thresholds(run).items())
    return [m for m in missed if m is not None]


def verdict(run: ReportRun) -> str:
    """ "worth it at these thresholds", "misses worst-frame PSNR by 0.75 dB", or "no thresholds
    set: nothing gated"."""
    outcome = gate_outcome(run)
    if outcome == NOT_GATED:
        return NOTHING_GATED
    missed = shortfalls(run)
    if outcome == FAILED or missed:
        if not missed:  # the run's own gate failed on something the params do not show
            return "gate failed (the run's log names the threshold)"
        return "misses " + _join(missed)
    return WORTH_IT


def _join(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _against(run: ReportRun, metric: str, text: str) -> str:
    """``text`` (the value) with the threshold in force and whether it is met: "24.25 (min
    25.00 ✗)"; ``text`` alone when no threshold is set."""
    limit = thresholds(run).get(metric)
    if limit is None:
        return text
    mark = "✓" if _miss(run, metric, limit) is None else "✗"
    # No-break spaces: a narrow column wraps between the value and its threshold, not inside.
    return f"{text} (min\u00a0{GATED[metric][3].format(limit)}\u00a0{mark})"


def speedup_text(run: ReportRun) -> str:
    """The headline speedup, with the 95% interval over a suite's pairs when there is one."""
    m = run.metrics
    text = format_cell(m.get(Metric.SPEEDUP), "{:.2f}")
    low, high = m.get("speedup_lcb"), m.get("speedup_ucb")
    if m.get("pairs", 1) > 1 and low is not None and high is not None:
        text += f" [{format_cell(low, '{:.2f}')}, {format_cell(high, '{:.2f}')}]"
    return text


def verdict_row(run: ReportRun) -> dict[str, Any]:
    """The verdict table's cells of one harness run."""
    psnr = format_cell(gated_value(run, Metric.PSNR_DB), "{:.2f}")
    worst = format_cell(gated_value(run, Metric.PSNR_WORST_FRAME_DB), "{:.2f}")
    return {
        "schedule": f"{run.tags.get('schedule', '?')} @ {run.tags.get('resolution', '?')}",
        Metric.SPEEDUP: _against(run, Metric.SPEEDUP, speedup_text(run)),
        "psnr": _against(run, Metric.PSNR_DB, psnr),
        "worst": _against(run, Metric.PSNR_WORST_FRAME_DB, worst),
        "gap": gap_text(run.metrics.get(Metric.GAP_TO_NOISE_FLOOR_DB)),
        "ssim": run.metrics.get(Metric.SSIM_FRAMES),
        "gate": gate_outcome(run),
        "verdict": verdict(run),
    }


def gap_text(gap: float | None) -> str:
    """The gap to the noise floor in dB; "inf" when the dense controls agree exactly."""
    if gap is None or math.isnan(gap):
        return "-"
    if math.isinf(gap) or abs(gap) > _MLFLOW_INF:
        return "inf" if gap > 0 else "-inf"
    return f"{gap:.2f}"


VERDICT_COLUMNS = (
    ("schedule @ resolution", "schedule", "{}"),
    ("speedup × (vs fastest dense)", Metric.SPEEDUP, "{}"),
    ("PSNR dB", "psnr", "{}"),
    ("worst-frame PSNR dB", "worst", "{}"),
    ("gap to noise floor dB", "gap", "{}"),
    ("SSIM", "ssim", "{:.4f}"),
    ("gate", "gate", "{}"),
    ("verdict", "verdict", "{}"),
)


def sentence(run: ReportRun) -> str:
    """One line on a schedule: how much faster, how far from dense, and the verdict."""
    m = run.metrics
    schedule, resolution = run.tags.get("schedule", "?"), run.tags.get("resolution", "?")
    name = f"{markdown_code(schedule)} at {markdown_text(resolution)}"
    speed = f"{speedup_text(run)}x the speed of the fastest dense control"
    psnr = format_cell(gated_value(run, Metric.PSNR_DB), "{:.2f}")
    worst = format_cell(gated_value(run, Metric.PSNR_WORST_FRAME_DB), "{:.2f}")
    quality = f"PSNR {psnr} dB (worst frame {worst} dB)"
    gap = m.get(Metric.GAP_TO_NOISE_FLOOR_DB)
    if gap is not None and math.isfinite(gap) and abs(gap) < _MLFLOW_INF:
        side = "below" if gap > 0 else "above"
        quality += f", {abs(gap):.2f} dB {side} the dense-vs-dense noise floor"
    return f"{name}: {speed}, {quality}; {verdict(run)}."


def verdict_section(runs: Sequence[ReportRun]) -> list[str]:
    """Markdown lines: the heading, one sentence per schedule, the verdict table."""
    lines = ["## Verdict", ""]
    if not runs:
        how = "`python -m evalharness -m schedule=conservative,balanced,aggressive`"
        return lines + [f"*No harness runs, so no verdict: run {how} first.*", ""]
    lines += [f"- {sentence(run)}" for run in runs] + [""]
    table = Table("Verdict", "", VERDICT_COLUMNS, [verdict_row(run) for run in runs])
    lines += [table.body(), ""]
    lines += [
        "*Speedup: fastest dense control's median denoising time / the sparse median (95% "
        "interval over a prompt suite's pairs in brackets). PSNR and SSIM: sparse against dense "
        "on raw frames; gap: dense-vs-dense noise floor minus PSNR (positive: further from dense "
        "than the dense controls are from each other; -: no noise-floor run; inf: the dense "
        "controls gave identical videos). Thresholds: the run's `gate.*` settings.*",
        "",
    ]
    return lines
