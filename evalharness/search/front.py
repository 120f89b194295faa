"""The study's trials as points of speed against quality: the Pareto front, the recommended
schedule (the fastest that meets every threshold), the best value a failed search reached, and
the front table. Pure functions (no Optuna, no MLflow): a resumed study reads the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalharness.formatting import markdown_table
from evalharness.metric_names import Metric
from evalharness.search.objectives import Reading

KNOBS = ("density", "first_times_fp", "first_layers_fp", "routing_samples", "variant")
# The speedup a recommended schedule must exceed: at or below it, dense attention is as fast.
DENSE_SPEEDUP = 1.0


@dataclass(frozen=True)
class TrialPoint:
    """One finished trial.

    Attributes:
        number: the Optuna trial number.
        knobs: the schedule's searched knobs (:data:`KNOBS`).
        speedup: the headline speedup (higher is better).
        psnr: the PSNR at the search's statistic, in dB (higher is better).
        readings: each gate threshold against the trial's metric.
        reference: the named schedule the trial ran (a reference point), else None.
        run_id: its MLflow run (None without tracking).
        run_dir: its run folder.
        noise_floor_db: its dense-vs-dense PSNR (NaN when not measured).
    """

    number: int
    knobs: Mapping[str, Any]
    speedup: float
    psnr: float
    readings: tuple[Reading, ...] = ()
    reference: str | None = None
    run_id: str | None = None
    run_dir: str | None = None
    noise_floor_db: float = float("nan")

    @property
    def feasible(self) -> bool:
        """Whether it meets every threshold."""
        return all(r.met for r in self.readings)


def dominates(a: TrialPoint, b: TrialPoint) -> bool:
    """Whether ``a`` is at least as good as ``b`` on both objectives and better on one."""
    return weakly_dominates(a, b) and (a.speedup > b.speedup or a.psnr > b.psnr)


def weakly_dominates(a: TrialPoint, b: TrialPoint) -> bool:
    """Whether ``a`` is at least as good as ``b`` on both objectives (equal counts)."""
    return a.speedup >= b.speedup and a.psnr >= b.psnr


def pareto_front(points: Sequence[TrialPoint]) -> list[TrialPoint]:
    """The points no other point dominates, by speedup (ascending).

    Args:
        points: finished trials; a point with a NaN objective is never on the front.
    """
    valid = [p for p in points if not (math.isnan(p.speedup) or math.isnan(p.psnr))]
    front = [p for p in valid if not any(dominates(q, p) for q in valid)]
    return sorted(front, key=lambda p: (p.speedup, p.psnr, p.number))


def feasible_front(points: Sequence[TrialPoint]) -> list[TrialPoint]:
    """The Pareto front of the trials that meet every threshold (Optuna's constrained front)."""
    return pareto_front([p for p in points if p.feasible])


def recommend(points: Sequence[TrialPoint]) -> TrialPoint | None:
    """The fastest trial (:func:`_fastest`) that meets every threshold and is faster than dense;
    None when none is."""
    return _fastest([p for p in points if p.feasible and p.speedup > DENSE_SPEEDUP])


def _fastest(points: Sequence[TrialPoint]) -> TrialPoint | None:
    """The fastest point (ties: the higher PSNR, then the earlier trial); None when empty."""
    return max(points, key=lambda p: (p.speedup, p.psnr, -p.number), default=None)


def no_recommendation_message(points: Sequence[TrialPoint]) -> str:
    """Why nothing is recommended: the trials that met every threshold were all no faster than
    dense (the fastest of them named), or no trial met them (:func:`unmet_message`)."""
    feasible = [p for p in points if p.feasible and not math.isnan(p.speedup)]
    if not feasible:
        return f"no trial of {len(points)} met every threshold; " + unmet_message(points)
    fastest = _fastest(feasible)
    return (
        f"{len(feasible)} trial(s) of {len(points)} met every threshold, but none is faster than "
        f"dense (speedup <= {DENSE_SPEEDUP:g}; the fastest, trial {fastest.number}, "
        f"{fastest.speedup:.3f}x with {knob_text(fastest.knobs)}), so no schedule is recommended; "
        "widen the search towards lower densities or relax a threshold"
    )


def unmet_message(points: Sequence[TrialPoint]) -> str:
    """Why no trial is feasible: each threshold with the best value any trial reached (NaN when
    none measured it), and the nearest trial (the one with the smallest total violation)."""
    best: dict[str, tuple[float, float]] = {}  # metric -> (best value, threshold)
    for r in (r for p in points for r in p.readings):
        value, _ = best.get(r.metric, (float("nan"), r.threshold))
        if not math.isnan(r.value) and (math.isnan(value) or r.value > value):
            value = r.value
        best[r.metric] = (value, r.threshold)
    parts = []
    for metric, (value, threshold) in best.items():
        verdict = "met by some trial" if value >= threshold else "never met"
        parts.append(
            f"{metric}: best {value:.4g} against the threshold {threshold:.4g} ({verdict})"
        )
    nearest = min(
        points, key=lambda p: sum(max(r.constraint, 0.0) for r in p.readings), default=None
    )
    tail = ""
    if nearest is not None:
        tail = f"; nearest: trial {nearest.number} ({knob_text(nearest.knobs)})"
    return "; ".join(parts) + tail


def uncovered_references(points: Sequence[TrialPoint]) -> list[TrialPoint]:
    """Reference trials that no point of the whole front weakly dominates (empty: the front
    dominates or equals every named schedule)."""
    front = pareto_front(points)
    refs = [p for p in points if p.reference]
    return [r for r in refs if not any(weakly_dominates(f, r) for f in front)]


def knob_text(knobs: Mapping[str, Any]) -> str:
    """The knobs in one line, e.g. ``density=0.25 first_times_fp=0.1 ...``."""
    return " ".join(f"{k}={_short(knobs[k])}" for k in KNOBS if k in knobs)


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def rounded(value: Any) -> Any:
    """A knob without its binary noise (Optuna's grid gives 0.30000000000000004)."""
    return round(value, 6) if isinstance(value, float) else value


def front_rows(points: Sequence[TrialPoint]) -> list[dict[str, Any]]:
    """One row per trial, by trial number, with whether it is on the (feasible) front."""
    on_front = {p.number for p in pareto_front(points)}
    on_feasible = {p.number for p in feasible_front(points)}
    best = recommend(points)
    rows = []
    for p in sorted(points, key=lambda p: p.number):
        row: dict[str, Any] = {"trial": p.number, **{k: p.knobs.get(k) for k in KNOBS}}
        row.update(speedup=p.speedup, psnr=p.psnr, feasible=p.feasible)
        row["reference"] = p.reference or ""
        row["front"] = (
            "feasible" if p.number in on_feasible else ("yes" if p.number in on_front else "")
        )
        row["recommended"] = "yes" if best is not None and best.number == p.number else ""
        row.update({r.metric: r.value for r in p.readings})
        rows.append(row)
    return rows


def front_table(points: Sequence[TrialPoint], psnr_label: str) -> str:
    """The front table in Markdown: every trial, its knobs, objectives, thresholds and place."""
    metrics = list(dict.fromkeys(r.metric for p in points for r in p.readings))
    columns = [("trial", "trial", "{}"), ("reference", "reference", "{}")]
    columns += [(k, k, "{}" if k == "variant" else "{:g}") for k in KNOBS]
    columns += [(Metric.SPEEDUP, Metric.SPEEDUP, "{:.3f}"), (psnr_label, "psnr", "{:.2f}")]
    columns += [(m, m, "{:.3f}") for m in metrics if m != psnr_label]
    columns += [(c, c, "{}") for c in ("feasible", "front", "recommended")]
    return markdown_table(front_rows(points), columns)
