"""The front figure: every trial (speedup against PSNR), the Pareto front, the named schedules
as reference points, the recommended schedule, the thresholds and the dense-vs-dense noise floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evalharness.metric_names import Metric  # noqa: E402
from evalharness.search.front import TrialPoint, feasible_front, pareto_front, recommend  # noqa: E402

# Infinite PSNR (identical frames) is drawn at the top of the axes, this far above the rest.
_INF_MARGIN_DB = 3.0
_THRESHOLD = {"color": "tab:red", "linestyle": "-.", "linewidth": 1}


def front_figure(
    points: Sequence[TrialPoint], path: Path, psnr_label: str, limits: Mapping[str, float]
) -> None:
    """Draws the figure and saves it as ``path`` (PNG); nothing when no trial has both objectives.

    Args:
        points: the finished trials.
        path: where the PNG goes.
        psnr_label: the y axis's metric, e.g. ``psnr_db_lcb``.
        limits: the gate's thresholds by metric: ``psnr_db`` (at that statistic) is drawn as a
            horizontal line, ``speedup`` as a vertical one.
    """
    drawn = [p for p in points if not (math.isnan(p.speedup) or math.isnan(p.psnr))]
    if not drawn:
        return
    finite = [p.psnr for p in drawn if math.isfinite(p.psnr)]
    top = (max(finite) if finite else 0.0) + _INF_MARGIN_DB

    def xy(group: Sequence[TrialPoint]) -> tuple[list[float], list[float]]:
        return [p.speedup for p in group], [p.psnr if math.isfinite(p.psnr) else top for p in group]

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    _points(ax, drawn, xy)
    # The noise floor: the median of the trials' dense-vs-dense PSNR.
    floors = sorted(p.noise_floor_db for p in drawn if math.isfinite(p.noise_floor_db))
    if floors:
        floor = floors[len(floors) // 2]
        ax.axhline(floor, color="tab:purple", linestyle=":", label=f"noise floor {floor:.1f} dB")
    psnr, speedup = limits.get(Metric.PSNR_DB), limits.get(Metric.SPEEDUP)
    if psnr is not None:
        ax.axhline(psnr, label=f"PSNR threshold {psnr:g} dB", **_THRESHOLD)
    if speedup is not None:
        ax.axvline(speedup, label=f"speedup threshold {speedup:g}x", **_THRESHOLD)
    ax.set_xlabel("speedup (dense median / sparse median, side by side)")
    ax.set_ylabel(f"{psnr_label} (dB)")
    ax.set_title("Schedule search: speed against quality")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _points(ax, drawn: Sequence[TrialPoint], xy) -> None:
    """The trials, both fronts, the named schedules and the recommended one."""
    for feasible, marker, label in (
        (True, "o", "trial (meets the gate)"),
        (False, "x", "trial (misses)"),
    ):
        group = [p for p in drawn if p.feasible == feasible]
        if group:
            ax.scatter(*xy(group), marker=marker, color="tab:gray", label=label, zorder=2)
    front = xy(pareto_front(drawn))
    ax.plot(*front, "--", color="tab:blue", label="Pareto front (all trials)", zorder=1)
    good = feasible_front(drawn)
    if good:
        ax.plot(*xy(good), "-o", color="tab:green", label="front within the thresholds", zorder=3)
    for p in (p for p in drawn if p.reference):
        (x,), (y,) = xy([p])
        ax.scatter([x], [y], marker="s", s=70, facecolors="none", edgecolors="tab:orange", zorder=4)
        ax.annotate(p.reference, (x, y), textcoords="offset points", xytext=(6, 4))
    best = recommend(drawn)
    if best is not None:
        label = f"recommended (trial {best.number})"
        ax.scatter(*xy([best]), marker="*", s=220, color="tab:red", label=label, zorder=5)
