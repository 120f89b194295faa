"""The front figure: every trial (speedup against PSNR), the Pareto front, the named schedules
as reference points, the recommended schedule, the thresholds and the dense-vs-dense noise floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evalharness.search.front import TrialPoint, feasible_front, pareto_front, recommend  # noqa: E402

# Infinite PSNR (identical frames) is drawn at the top of the axes, this far above the rest.
_INF_MARGIN_DB = 3.0


def front_figure(
    points: Sequence[TrialPoint],
    path: Path,
    *,
    psnr_label: str,
    psnr_threshold: float | None,
    speedup_threshold: float | None,
) -> Path | None:
    """Draws the figure and saves it as ``path`` (PNG); None when no trial has both objectives.

    Args:
        points: the finished trials.
        path: where the PNG goes.
        psnr_label: the y axis's metric, e.g. ``psnr_db_lcb``.
        psnr_threshold: the PSNR threshold at that statistic (a horizontal line), or None.
        speedup_threshold: the speedup threshold (a vertical line), or None.
    """
    drawn = [p for p in points if not (math.isnan(p.speedup) or math.isnan(p.psnr))]
    if not drawn:
        return None
    finite = [p.psnr for p in drawn if math.isfinite(p.psnr)]
    top = (max(finite) if finite else 0.0) + _INF_MARGIN_DB

    def y(p: TrialPoint) -> float:
        return p.psnr if math.isfinite(p.psnr) else top

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    _points(ax, drawn, y)
    _lines(ax, drawn, psnr_threshold, speedup_threshold)
    ax.set_xlabel("speedup (dense median / sparse median, side by side)")
    ax.set_ylabel(f"{psnr_label} (dB)")
    ax.set_title("Schedule search: speed against quality")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _lines(ax, drawn, psnr_threshold: float | None, speedup_threshold: float | None) -> None:
    """The thresholds and the noise floor (the median of the trials' dense-vs-dense PSNR)."""
    floors = sorted(p.noise_floor_db for p in drawn if math.isfinite(p.noise_floor_db))
    if floors:
        floor = floors[len(floors) // 2]
        ax.axhline(floor, color="tab:purple", linestyle=":", label=f"noise floor {floor:.1f} dB")
    if psnr_threshold is not None:
        ax.axhline(
            psnr_threshold,
            color="tab:red",
            linestyle="-.",
            linewidth=1,
            label=f"PSNR threshold {psnr_threshold:g} dB",
        )
    if speedup_threshold is not None:
        ax.axvline(
            speedup_threshold,
            color="tab:red",
            linestyle="-.",
            linewidth=1,
            label=f"speedup threshold {speedup_threshold:g}x",
        )


def _points(ax, drawn: Sequence[TrialPoint], y) -> None:
    """The trials, both fronts, the named schedules and the recommended one."""
    for feasible, marker, label in (
        (True, "o", "trial (meets the gate)"),
        (False, "x", "trial (misses)"),
    ):
        group = [p for p in drawn if p.feasible == feasible]
        if group:
            ax.scatter(
                [p.speedup for p in group],
                [y(p) for p in group],
                marker=marker,
                color="tab:gray",
                label=label,
                zorder=2,
            )
    front = pareto_front(drawn)
    ax.plot(
        [p.speedup for p in front],
        [y(p) for p in front],
        "--",
        color="tab:blue",
        label="Pareto front (all trials)",
        zorder=1,
    )
    good = feasible_front(drawn)
    if good:
        ax.plot(
            [p.speedup for p in good],
            [y(p) for p in good],
            "-o",
            color="tab:green",
            label="front within the thresholds",
            zorder=3,
        )
    for p in (p for p in drawn if p.reference):
        ax.scatter(
            [p.speedup],
            [y(p)],
            marker="s",
            s=70,
            facecolors="none",
            edgecolors="tab:orange",
            zorder=4,
        )
        ax.annotate(p.reference, (p.speedup, y(p)), textcoords="offset points", xytext=(6, 4))
    best = recommend(drawn)
    if best is not None:
        ax.scatter(
            [best.speedup],
            [y(best)],
            marker="*",
            s=220,
            color="tab:red",
            label=f"recommended (trial {best.number})",
            zorder=5,
        )
