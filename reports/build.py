"""Builds the report from runs, written as ``report.md``, ``figures/*.png`` and one
self-contained ``report.html``.

The page answers first: the verdict per schedule (``reports.verdict``), then ours beside the seed's
and the papers' figures, quality against speed with the dense reference point, then the detail
tables (Table 1, 2, 3), the other figures and the benchmark appendix."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evalharness.formatting import markdown_text
from reports import figures, mask_figures
from reports.html_page import render_html
from reports.methods_section import methods_section
from reports.papers_table import papers_section
from reports.search_section import search_section
from reports.seed_table import seed_section
from reports.sources import Artifacts, ReportError, ReportRun, of_kind
from reports.table3 import harness_runs, table3
from reports.tables import Table, table1, table2
from reports.untrusted import untrusted_markdown
from reports.verdict import verdict_section

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

APPENDIX_BENCHES = ("tile_sweep", "temporal_heads", "kernel_memory", "schedules", "placement")
# figure file stem -> (caption, what to run when it is missing)
FIGURES = {
    "pareto": (
        "Quality vs speed across schedules; star: dense attention (speedup 1, at the "
        "dense-vs-dense noise floor); dashed: the Pareto frontier per resolution",
        "a sweep: `python -m evalharness -m schedule=dense,conservative,balanced,aggressive`",
    ),
    "tile_sweep": (
        "Latency vs masked work across tile sizes (tile-sweep runs)",
        "`python -m evalharness.bench --mlflow`",
    ),
    "masks": (
        "SVG masks of the chosen plan in frame-major and temporal-major layouts (axes in "
        "tokens, drawn from at most 480 evenly spaced query and key tokens)",
        "a sparse harness run (its geometry, density and tiles)",
    ),
    "tile_classes": (
        "Tile classes (empty / partial / full) of the chosen plan",
        "a sparse harness run (its geometry, density and tiles)",
    ),
    "routing": (
        "Routing heat maps: heads sent to the temporal mask per step and layer",
        "a sparse harness run (it logs routing_stats.npz)",
    ),
    "frame_psnr": (
        "Per-frame PSNR of the sparse video against the dense one",
        "a harness run (it logs the psnr_frame_db history)",
    ),
}


@dataclass
class Report:
    """What was built.

    Attributes:
        folder: the output folder.
        markdown: ``report.md``.
        html: ``report.html``.
        figures: figure stem -> PNG path, for the figures that had data.
        tables: the tables, in page order.
        missing: what could not be drawn or filled, each with the command that would.
        runs: the source runs.
    """

    folder: Path
    markdown: Path
    html: Path
    figures: dict[str, Path]
    tables: list[Table]
    missing: list[str] = field(default_factory=list)
    runs: list[ReportRun] = field(default_factory=list)


def choose_plan_run(runs: Sequence[ReportRun], run_id: str | None = None) -> ReportRun | None:
    """The harness run whose plan the mask figures draw: ``run_id``, else the first sparse run
    of Table 3's order (None when there is none: the figures are left out).

    Raises:
        ReportError: ``run_id`` is not one of the report's harness runs.
    """
    candidates = harness_runs(runs)
    if run_id:
        chosen = next((r for r in candidates if r.run_id == run_id), None)
        if chosen is None:
            ids = ", ".join(r.run_id for r in candidates[:3]) or "none"
            raise ReportError(
                f"--plan-run {run_id} is not one of the report's {len(candidates)} harness runs "
                f"(the first: {ids}): give one of their ids, or leave --plan-run out to draw "
                "the first sparse run"
            )
        return chosen
    return next((r for r in candidates if r.params.get("schedule.sparse") == "True"), None)


def _figures(
    client: MlflowClient,
    runs: list[ReportRun],
    artifacts: Artifacts,
    folder: Path,
    chosen: ReportRun | None,
) -> dict[str, Path | None]:
    harness = harness_runs(runs)
    sparse = [r for r in harness if r.params.get("schedule.sparse") == "True"]
    out: dict[str, Path | None] = {
        "pareto": figures.pareto_figure(harness, folder / "pareto.png"),
        "tile_sweep": figures.tile_sweep_figure(runs, artifacts, folder / "tile_sweep.png"),
        "masks": None,
        "tile_classes": None,
        "routing": figures.routing_figure(sparse, artifacts, folder / "routing.png"),
        "frame_psnr": figures.frame_psnr_figure(client, harness, folder / "frame_psnr.png"),
    }
    if chosen is not None:
        choice = mask_figures.plan_choice(chosen)
        out["masks"] = mask_figures.masks_figure(choice, folder / "masks.png")
        out["tile_classes"] = mask_figures.tile_classes_figure(choice, folder / "tile_classes.png")
    return out


def _appendix(runs: list[ReportRun], artifacts: Artifacts) -> list[str]:
    parts = ["## Benchmarks", ""]
    for bench in APPENDIX_BENCHES:
        for run in of_kind(runs, f"bench:{bench}")[:2]:
            md = artifacts.path(run, f"{bench}.md")
            if md is None:
                continue
            where = (run.machine, run.tags.get("backend", "?"), run.versions)
            machine, backend, versions = (markdown_text(text) for text in where)
            parts += [
                f"### {bench} ({markdown_text(run.name)})",
                "",
                f"*machine {machine}; backend {backend}; {versions}*",
                "",
            ]
            body = "\n" + untrusted_markdown(md.read_text())
            body = body.replace("\n### ", "\n#### ").replace("\n## ", "\n#### ")
            parts += [body.strip(), ""]
    return parts if len(parts) > 2 else []


def _header(runs: list[ReportRun], source: str) -> list[str]:
    kinds: dict[str, int] = {}
    for run in runs:
        kinds[run.kind] = kinds.get(run.kind, 0) + 1
    counts = markdown_text(", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    machines = sorted({markdown_text(r.machine) for r in runs})
    return [
        "# Sparse attention evaluation report",
        "",
        f"*Built {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from {markdown_text(source)}: {counts}; "
        "machines: "
        f"{'; '.join(machines)}.*",
        "",
    ]


def _figure(stem: str, drawn: dict[str, Path | None], missing: list[str]) -> list[str]:
    """The Markdown of one figure, or its one-line "no data" note (added to ``missing``)."""
    caption, how = FIGURES[stem]
    if drawn.get(stem) is not None:
        return [f"![{caption}](figures/{stem}.png)", ""]
    missing.append(f"no data for the figure '{stem}': needs {how}")
    return [f"*{caption}: no data; needs {how}*", ""]


def _markdown(
    runs: list[ReportRun], source: str, tables: list[Table], drawn: dict, appendix: list[str]
) -> tuple[str, list[str]]:
    """The page in order: verdict, Pareto plot, detail tables, figures, appendix; and what is
    missing."""
    lines = _header(runs, source) + verdict_section(harness_runs(runs))
    lines += seed_section(runs)  # our measurements beside the seed's, with seed-setting runs
    lines += papers_section(runs)  # the papers' PSNR / SSIM / LPIPS / speedup rows beside ours
    lines += methods_section(runs)  # SVG, STA and Radial side by side, with their Pareto front
    missing = [note for t in tables for note in t.notes if note.startswith("no ")]
    lines += _figure("pareto", drawn, missing)
    for table in tables:
        lines += [table.markdown(), ""]
    lines += ["## Figures", ""]
    for stem in FIGURES:
        if stem != "pareto":
            lines += _figure(stem, drawn, missing)
    lines += appendix
    return "\n".join(lines).rstrip() + "\n", missing


def build_report(
    client: MlflowClient,
    runs: list[ReportRun],
    folder: Path,
    *,
    source: str,
    plan_run: str | None = None,
) -> Report:
    """Writes ``report.md``, ``figures/`` and ``report.html`` into ``folder``.

    Args:
        client: the MLflow client the runs came from (artifacts, metric histories).
        runs: the source runs (``reports.sources.load_runs``).
        folder: output folder (created).
        source: what the runs are, for the header (e.g. "experiment 'evalharness' at ...").
        plan_run: run id of the harness run whose plan the mask figures draw.

    Raises:
        ReportError: ``plan_run`` is not one of ``runs``' harness runs (nothing is written).
    """
    chosen = choose_plan_run(runs, plan_run)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "figures").mkdir(exist_ok=True)
    artifacts = Artifacts(client)
    try:
        tables = [table1(runs), *table2(runs, artifacts), table3(runs)]
        drawn = _figures(client, runs, artifacts, folder / "figures", chosen)
        # A schedule search's front and recommendation, before the benchmarks.
        appendix = search_section(runs, artifacts, folder / "figures") + _appendix(runs, artifacts)
    finally:
        artifacts.close()
    markdown, missing = _markdown(runs, source, tables, drawn, appendix)
    md_path = folder / "report.md"
    md_path.write_text(markdown)
    html_path = folder / "report.html"
    html_path.write_text(render_html(markdown, folder, "Sparse attention evaluation report"))
    return Report(
        folder=folder,
        markdown=md_path,
        html=html_path,
        figures={k: v for k, v in drawn.items() if v is not None},
        tables=tables,
        missing=missing,
        runs=runs,
    )
