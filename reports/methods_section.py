"""The report's method comparison: our runs of different training-free sparse attentions (Sparse
VideoGen's routed heads, Sliding Tile Attention, Radial Attention) side by side per setting, each
marked on or off the Pareto front of speedup against PSNR.

A setting is one model, resolution and backend: the runs in it share the dense control their
speedup is measured against, so only they are compared. The section appears where a setting holds
runs of at least two methods (``python -m evalharness -m schedule=svg_720p,sta,radial``, see
docs/methods.md); the same rows for one sweep come from ``python -m evalharness.bench.methods``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evalharness.formatting import format_cell, markdown_table
from evalharness.metric_names import Metric
from reports.figures import pareto_front
from reports.sources import ReportRun
from reports.table3 import harness_runs

COLUMNS = (
    ("model", "model", "{}"),
    ("resolution", "resolution", "{}"),
    ("backend", "backend", "{}"),
    ("schedule", "schedule", "{}"),
    ("method", "method", "{}"),
    ("mask kept", "mask_kept", "{}"),
    ("speedup", "speedup", "{}"),
    ("PSNR dB", "psnr", "{}"),
    ("SSIM", "ssim", "{}"),
    ("LPIPS", "lpips", "{}"),
    ("Pareto", "pareto", "{}"),
    ("run", "run", "{}"),
)


def _setting(run: ReportRun) -> tuple[str, ...]:
    return tuple(run.tags.get(key, "-") for key in ("model", "resolution", "backend"))


def _method(run: ReportRun) -> str:
    return run.params.get("schedule.method", "svg")


def _point(run: ReportRun) -> tuple[float, float] | None:
    """(speedup, PSNR) where both are finite numbers; None otherwise (not placed on the front)."""
    speedup, psnr = run.metrics.get(Metric.SPEEDUP), run.metrics.get(Metric.PSNR_DB)
    if speedup is None or psnr is None or not (math.isfinite(speedup) and math.isfinite(psnr)):
        return None
    return float(speedup), float(psnr)


def _row(run: ReportRun, on_front: bool | None) -> dict[str, Any]:
    m = run.metrics
    model, resolution, backend = _setting(run)
    return {
        "model": model,
        "resolution": resolution,
        "backend": backend,
        "schedule": run.tags.get("schedule", "-"),
        "method": _method(run),
        "mask_kept": format_cell(m.get("mask_density"), "{:.3f}"),
        "speedup": format_cell(m.get(Metric.SPEEDUP), "{:.2f}x"),
        "psnr": format_cell(m.get(Metric.PSNR_DB), "{:.2f}"),
        "ssim": format_cell(m.get(Metric.SSIM_FRAMES), "{:.4f}"),
        "lpips": format_cell(m.get(Metric.LPIPS), "{:.4f}"),
        "pareto": {True: "yes", False: "", None: "-"}[on_front],
        "run": run.name,
    }


def methods_rows(runs: Sequence[ReportRun]) -> list[dict[str, Any]]:
    """One row per sparse harness run (newest per schedule) of each setting that holds at least
    two methods, with its Pareto flag within the setting ("-": no speedup or PSNR to place).

    Args:
        runs: every run the report read.

    Returns:
        Rows keyed as ``COLUMNS``, settings in the report's table order.
    """
    settings: dict[tuple[str, ...], list[ReportRun]] = {}
    for run in harness_runs(runs):
        if run.params.get("schedule.sparse") == "True":
            settings.setdefault(_setting(run), []).append(run)
    rows: list[dict[str, Any]] = []
    for group in settings.values():
        if len({_method(run) for run in group}) < 2:
            continue
        placed = [(run, _point(run)) for run in group]
        points = [point for _, point in placed if point is not None]
        front = {points[i] for i in pareto_front(points)}
        rows += [_row(run, None if p is None else p in front) for run, p in placed]
    return rows


def methods_section(runs: Sequence[ReportRun]) -> list[str]:
    """The report's section as Markdown lines; none where no setting holds two methods."""
    rows = methods_rows(runs)
    if not rows:
        return []
    return [
        "## Methods side by side",
        "",
        "Our runs of each training-free sparse attention in one setting (model, resolution, "
        "backend: one dense control), speedup against that control and PSNR of the whole video "
        "against the dense one; `Pareto`: no other run of the setting is at least as fast and at "
        "least as close to dense, and better in one.",
        "",
        markdown_table(rows, COLUMNS, escape=True),
        "",
    ]
