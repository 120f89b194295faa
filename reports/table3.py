"""Table 3: end to end per resolution and schedule, from the harness's runs.

One row per (model, resolution, schedule, backend), the newest run of each. Up front, what
decides a schedule: dense and sparse median denoising times, the headline speedup (against the
fastest dense control), raw-frame PSNR with its interval when the run is a prompt suite
(``psnr_db_lcb`` / ``psnr_db_ucb`` over more than one pair), the worst frame's PSNR, the
dense-vs-dense noise floor and the gap to it, the pairs kept over the whole run and the gate
outcome (``passed``, ``failed`` or ``not gated``: ``reports.verdict.gate_outcome``). Behind
``<details>``: model, tokens, steps, pairs, SSIM, the band density of the sparse layers, the
speedup against each dense control by name (``speedup_vs_<executor>``) and the provenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalharness.formatting import format_cell
from evalharness.metric_names import Metric
from reports.sources import ReportRun, of_kind
from reports.tables import PROVENANCE_COLUMNS, Table, fixed, mark_mixed_machines, provenance
from reports.verdict import gap_text, gate_outcome

SCHEDULE_ORDER = ("dense", "conservative", "balanced", "aggressive")
_RESOLUTION_ORDER = ("test", "cpu", "480p", "720p", "1080p", "1440p")


def harness_runs(runs: Sequence[ReportRun]) -> list[ReportRun]:
    """The newest harness run per (model, resolution, schedule, backend), in table order."""
    newest: dict[tuple, ReportRun] = {}
    for run in of_kind(runs, "harness"):
        key = tuple(run.tags.get(k) for k in ("model", "resolution", "schedule", "backend"))
        newest.setdefault(key, run)

    def order(run: ReportRun) -> tuple:
        res, schedule = run.tags.get("resolution", ""), run.tags.get("schedule", "")
        return (
            _RESOLUTION_ORDER.index(res) if res in _RESOLUTION_ORDER else len(_RESOLUTION_ORDER),
            res,
            run.tags.get("model", ""),
            SCHEDULE_ORDER.index(schedule) if schedule in SCHEDULE_ORDER else len(SCHEDULE_ORDER),
            schedule,
        )

    return sorted(newest.values(), key=order)


def controls(runs: Sequence[ReportRun]) -> list[str]:
    """Every dense control a run was timed against (``speedup_vs_<name>``), sorted; not
    ``speedup_vs_dense_arm``, which names the dense arm's role, not a control."""
    names = {
        k.removeprefix("speedup_vs_")
        for r in runs
        for k in r.metrics
        if k.startswith("speedup_vs_") and k != "speedup_vs_dense_arm"
    }
    return sorted(names)


def psnr_cell(run: ReportRun) -> str:
    """PSNR in dB, with ``[lcb, ucb]`` when the run is a suite of more than one pair."""
    psnr = format_cell(run.metrics.get(Metric.PSNR_DB), "{:.2f}")
    low, high = run.metrics.get("psnr_db_lcb"), run.metrics.get("psnr_db_ucb")
    if run.metrics.get("pairs", 1) > 1 and low is not None and high is not None:
        return f"{psnr} [{format_cell(low, '{:.2f}')}, {format_cell(high, '{:.2f}')}]"
    return psnr


def row(run: ReportRun, names: Sequence[str]) -> dict[str, Any]:
    """One Table 3 row of a harness run."""
    m = run.metrics
    out: dict[str, Any] = {
        "model": run.tags.get("model"),
        "resolution": run.tags.get("resolution"),
        "tokens": m.get("tokens"),
        "schedule": run.tags.get("schedule"),
        "steps": run.params.get("steps"),
        "pairs": m.get("pairs"),
        "dense_median_s": m.get("dense_median_s"),
        "sparse_median_s": m.get("sparse_median_s"),
        Metric.SPEEDUP: m.get(Metric.SPEEDUP),
        "psnr": psnr_cell(run),
        Metric.PSNR_WORST_FRAME_DB: m.get(Metric.PSNR_WORST_FRAME_DB),
        Metric.SSIM_FRAMES: m.get(Metric.SSIM_FRAMES),
        Metric.NOISE_FLOOR_PSNR_DB: m.get(Metric.NOISE_FLOOR_PSNR_DB),
        Metric.GAP_TO_NOISE_FLOOR_DB: gap_text(m.get(Metric.GAP_TO_NOISE_FLOOR_DB)),
        "schedule_kept_fraction": m.get("schedule_kept_fraction"),
        "density": run.params.get("schedule.density"),
        "gate": gate_outcome(run),
        **provenance(run),
    }
    for name in names:
        out[f"speedup_vs_{name}"] = m.get(f"speedup_vs_{name}")
    return out


def table3_columns(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> tuple[tuple, tuple]:
    """Table 3's columns up front (what decides a schedule) and behind ``<details>``."""
    seconds = fixed(rows, "dense_median_s", "sparse_median_s")
    front = (
        ("resolution", "resolution", "{}"),
        ("schedule", "schedule", "{}"),
        ("dense median s", "dense_median_s", seconds),
        ("sparse median s", "sparse_median_s", seconds),
        ("speedup × (fastest dense)", Metric.SPEEDUP, "{:.3f}"),
        ("PSNR dB [interval]", "psnr", "{}"),
        ("worst-frame PSNR dB", Metric.PSNR_WORST_FRAME_DB, "{:.2f}"),
        ("noise floor dB", Metric.NOISE_FLOOR_PSNR_DB, "{:.2f}"),
        ("gap to floor dB", Metric.GAP_TO_NOISE_FLOOR_DB, "{}"),
        ("kept pairs, whole run", "schedule_kept_fraction", "{:.3f}"),
        ("gate", "gate", "{}"),
    )
    details = (
        ("model", "model", "{}"),
        ("tokens", "tokens", "{:,.0f}"),
        ("steps", "steps", "{}"),
        ("pairs", "pairs", "{:.0f}"),
        ("SSIM", Metric.SSIM_FRAMES, "{:.4f}"),
        ("band density (sparse layers)", "density", "{}"),
        *((f"speedup × vs {n}", f"speedup_vs_{n}", "{:.3f}") for n in names),
        *PROVENANCE_COLUMNS,
    )
    return front, details


def table3(runs: Sequence[ReportRun]) -> Table:
    """End to end per resolution and schedule (seed Table 3)."""
    chosen = harness_runs(runs)
    names = controls(chosen)
    rows = [row(run, names) for run in chosen]
    front, details = table3_columns(rows, names)
    table = Table(
        "Table 3: end to end per resolution and schedule",
        "Median denoising time of the dense and sparse arms (warm runs, interleaved, same "
        "process); speedup = dense / sparse against the fastest dense control (against each "
        "control by name under More columns); PSNR of the sparse video against the dense one on "
        "raw frames (a prompt suite's interval in brackets), beside the dense-vs-dense noise "
        "floor. Kept pairs, whole run: the attention pairs computed over all steps and layers, "
        "dense steps and layers counted whole (the band density alone is under More columns).",
        front,
        rows,
        details=details,
        key_columns=2,
    )
    skipped = len(of_kind(runs, "negative_control"))
    if skipped:
        table.notes.append(f"{skipped} negative-control run(s) left out (deliberately broken arms)")
    if not chosen:
        table.notes.append(
            "no harness runs: run `python -m evalharness schedule=balanced` (or a sweep, "
            "`-m schedule=dense,conservative,balanced,aggressive`) with the same tracking URI "
            "and experiment"
        )
    mark_mixed_machines(table)
    return table
