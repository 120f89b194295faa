"""The report's schedule-search section: for each search in the experiment (the parent runs of
``python -m evalharness.search``, tag ``run_kind=search``), newest first, its front table, its
figure and its recommended schedule, from the artifacts the search logged (``front.md``,
``front.png``, ``summary.json``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from evalharness.formatting import markdown_code, markdown_text
from evalharness.tracking import RUN_KIND_TAG, SEARCH_KIND
from reports.sources import Artifacts, ReportRun
from reports.untrusted import untrusted_markdown

MAX_SEARCHES = 3  # the newest; older ones stay in MLflow


def search_runs(runs: Sequence[ReportRun]) -> list[ReportRun]:
    """The search parents among ``runs``, newest first."""
    found = [r for r in runs if r.tags.get(RUN_KIND_TAG) == SEARCH_KIND]
    return sorted(found, key=lambda r: -r.start_time)


def search_section(runs: Sequence[ReportRun], artifacts: Artifacts, figures: Path) -> list[str]:
    """The section's Markdown lines (empty when the experiment holds no search).

    Args:
        runs: the report's runs.
        artifacts: their artifacts.
        figures: the report's figure folder (each search's ``front.png`` is copied there).
    """
    searches = search_runs(runs)[:MAX_SEARCHES]
    if not searches:
        return []
    lines = ["## Schedule search", ""]
    for run in searches:
        lines += _one_search(run, artifacts, figures)
    return lines


def _one_search(run: ReportRun, artifacts: Artifacts, figures: Path) -> list[str]:
    """One search: its recommendation, its figure and its front table."""
    name = run.tags.get("search", run.name)
    lines = [f"### {markdown_text(name)}", ""]
    summary = artifacts.json(run, "summary.json") or {}
    best = summary.get("recommended")
    if best:
        knobs = " ".join(f"{k}={v}" for k, v in best.get("knobs", {}).items())
        schedule = f"conf/schedule/{run.tags.get('recommended_schedule', '?')}.yaml"
        lines += [
            f"Recommended: trial {markdown_text(best['trial'])}, speedup {best['speedup']:.3f}x, "
            f"{markdown_text(summary.get('psnr_metric', 'PSNR'))} {best['psnr']:.2f} dB "
            f"({markdown_text(knobs)}); its schedule file is the run's artifact "
            f"{markdown_code(schedule)}.",
            "",
        ]
    else:
        trials = markdown_text(summary.get("trials", "?"))
        lines += [f"No trial of {trials} met every threshold.", ""]
    uncovered = summary.get("references_not_covered") or []
    if uncovered:
        names = markdown_text(", ".join(map(str, uncovered)))
        lines += [f"Named schedules the front does not dominate: {names}.", ""]
    png = artifacts.path(run, "front.png")
    if png is not None:
        target = figures / f"search-{_safe(name)}.png"
        shutil.copyfile(png, target)
        caption = f"Schedule search {markdown_text(name)}: speed against quality"
        lines += [f"![{caption}](figures/{target.name})", ""]
    table = artifacts.path(run, "front.md")
    if table is not None:
        lines += [untrusted_markdown(table.read_text().strip()), ""]
    return lines


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
