"""The report's figures from logged runs: quality against speed with the Pareto frontier, latency
against masked work across tile sizes, routing heat maps and per-frame PSNR.

Each function saves one PNG and returns its path, or returns None when the runs hold nothing to
draw (the report then says which command would produce it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from evalharness.metric_names import Metric
from reports.sources import Artifacts, ReportRun, of_kind  # noqa: E402

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# MLflow stores an infinite PSNR (identical videos) as a huge float.
_FINITE_LIMIT = 1e300


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both speedup (x) and PSNR (y), by x.

    Args:
        points: (speedup, psnr) pairs; higher is better on both.
    """
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return sorted(front, key=lambda i: points[i][0])


def _psnr(value: float | None) -> float | None:
    if value is None:
        return None
    return math.inf if (math.isinf(value) or value > _FINITE_LIMIT) else float(value)


def _floor(runs: Sequence[ReportRun]) -> float | None:
    """The lowest finite dense-vs-dense noise floor among ``runs`` (None when none was run)."""
    floors = [_psnr(r.metrics.get(Metric.NOISE_FLOOR_PSNR_DB)) for r in runs]
    finite = [f for f in floors if f is not None and math.isfinite(f)]
    return min(finite) if finite else None


def _dense_reference(
    ax, runs: Sequence[ReportRun], top: float, color: str, legend: bool
) -> tuple[float, float]:
    """Draws dense attention as a star at speedup 1.0 and the noise floor PSNR (how far dense
    itself lands from dense; at the top edge, as inf, without a noise-floor run) and returns it.
    The legend names it (once: ``legend``), since a label beside it would cover the schedules
    close to 1.0x."""
    floor = _floor(runs)
    y = top if floor is None else floor
    where = "PSNR inf, drawn at the top" if floor is None else "at the noise floor"
    label = f"dense reference (speedup 1, {where})" if legend else None
    ax.scatter(
        [1.0], [y], marker="*", s=180, color=color, edgecolors="black", zorder=3, label=label
    )
    return 1.0, y


def pareto_figure(runs: Sequence[ReportRun], path: Path) -> Path | None:
    """PSNR against speedup, one point per harness run, the frontier per resolution joined.

    Dense attention is the reference point of each resolution: speedup 1.0 at the dense-vs-dense
    noise floor (what a second dense executor scores against the first), and it takes part in
    the frontier. Infinite PSNR (identical videos) is drawn at the top edge and labelled.
    """
    points = [
        (r, float(r.metrics[Metric.SPEEDUP]), _psnr(r.metrics.get(Metric.PSNR_DB)))
        for r in runs
        if r.metrics.get(Metric.SPEEDUP) is not None and r.metrics.get(Metric.PSNR_DB) is not None
    ]
    if not points:
        return None
    finite = [p for _, _, p in points if math.isfinite(p)]
    finite += [f for f in [_floor(runs)] if f is not None]
    top = (max(finite) + 3.0) if finite else 60.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n, res in enumerate(sorted({r.tags.get("resolution", "?") for r, _, _ in points})):
        group = [(r, x, min(y, top)) for r, x, y in points if r.tags.get("resolution") == res]
        color = f"C{n}"
        ax.scatter([x for _, x, _ in group], [y for _, _, y in group], color=color, label=res)
        for r, x, y in group:
            name = r.tags.get("schedule", "?") + (" (inf)" if y == top else "")
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        xy = [(x, y) for _, x, y in group]
        xy.append(_dense_reference(ax, [r for r, _, _ in group], top, color, n == 0))
        front = pareto_front(xy)
        ax.plot(
            [xy[i][0] for i in front],
            [xy[i][1] for i in front],
            "--",
            color=color,
            label=f"{res} Pareto frontier",
        )
    floor = _floor([r for r, _, _ in points])
    if floor is not None:
        ax.axhline(floor, ls=":", c="grey", label="noise floor (lowest)")
    ax.axvline(1.0, ls=":", c="lightgrey")
    ax.set_xlabel("speedup (fastest dense control / sparse, median denoising time)")
    ax.set_ylabel("PSNR against dense, raw frames (dB)")
    ax.set_title("Quality vs speed across schedules (star: dense reference)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _sweep_series(
    data: dict,
) -> tuple[list[float], list[float], list[float], list[float], list[str]]:
    """(masked %, median, min, max, labels) of a tile-sweep artifact's timed rows."""
    xs, ys, lows, highs, labels = [], [], [], [], []
    for row in data.get("rows", []):
        prefix = "b3_" if "b3_median_ms" in row or "refused" in row else ""
        if row.get("refused") or row.get(f"{prefix}median_ms") is None:
            continue
        xs.append(100 * row[f"{prefix}masked_fraction"])
        ys.append(row[f"{prefix}median_ms"])
        lows.append(row[f"{prefix}median_ms"] - row[f"{prefix}min_ms"])
        highs.append(row[f"{prefix}max_ms"] - row[f"{prefix}median_ms"])
        labels.append(f"{row['block_q']}x{row['block_kv']}")
    return xs, ys, lows, highs, labels


def tile_sweep_figure(runs: Sequence[ReportRun], artifacts: Artifacts, path: Path) -> Path | None:
    """Latency (median, min-max bars) against the share of visited tiles that need a mask, one
    labelled point per tile size, one series per tile-sweep run (seed Figure 7)."""
    sweeps = of_kind(runs, "bench:tile_sweep")[:4]
    series = [(r, _sweep_series(artifacts.json(r, "tile_sweep.json") or {})) for r in sweeps]
    series = [(r, s) for r, s in series if s[0]]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run, (xs, ys, lows, highs, labels) in series:
        p = run.params
        name = f"{p.get('backend')} {p.get('tokens')} tok ({run.tags.get('device_kind', '?')})"
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-", capsize=3, label=name)
        for x, y, label in zip(xs, ys, labels, strict=True):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("visited tiles needing a mask (%)")
    ax.set_ylabel("median latency (ms)")
    ax.set_title("Latency vs masked work across tile sizes (BQ x BKV)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def routing_figure(runs: Sequence[ReportRun], artifacts: Artifacts, path: Path) -> Path | None:
    """Heads routed temporal per (step, layer), one panel per sparse harness run."""
    panels = []
    for run in runs:
        stats = artifacts.path(run, "routing_stats.npz")
        if stats is None:
            continue
        with np.load(stats) as data:
            panels.append((run, np.asarray(data["temporal_fraction"], float)))
    if not panels:
        return None
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.6 * len(panels) + 1.5, 3.6), squeeze=False, layout="constrained"
    )
    image = None
    for ax, (run, fraction) in zip(axes[0], panels, strict=True):
        image = ax.imshow(fraction, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_title(f"{run.tags.get('schedule')} @ {run.tags.get('resolution')}", fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel("denoising step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=axes[0].tolist(), label="temporal heads (blank: dense)")
    fig.suptitle("Routing: share of heads sent to the temporal mask", fontsize=10)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def frame_psnr_figure(client: MlflowClient, runs: Sequence[ReportRun], path: Path) -> Path | None:
    """Per-frame PSNR (metric history ``psnr_frame_db``) of each harness run."""
    curves = []
    for run in runs:
        history = sorted(
            client.get_metric_history(run.run_id, "psnr_frame_db"), key=lambda m: m.step
        )
        if history:
            curves.append((run, [m.step for m in history], [m.value for m in history]))
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    finite = [v for _, _, vs in curves for v in vs if v < _FINITE_LIMIT]
    top = max(finite) + 3.0 if finite else 60.0
    for run, steps, values in curves:
        label = f"{run.tags.get('schedule')} @ {run.tags.get('resolution')}"
        identical = sum(v >= _FINITE_LIMIT for v in values)
        if identical:  # infinite PSNR cannot be plotted: say where those frames are drawn
            frames = "frame" if identical == 1 else "frames"
            label += f" ({identical} identical {frames}, inf, drawn at the top)"
        ax.plot(steps, [min(v, top) for v in values], marker=".", label=label)
    ax.set_xlabel("frame")
    ax.set_ylabel("PSNR sparse vs dense (dB)")
    ax.set_title("Per-frame PSNR")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
