"""The papers' table: PSNR / SSIM / LPIPS / speedup per schedule in the layout of Sparse
VideoGen's quality table, each published row beside ours where we run its setting.

Every row is one source, never mixed: ``paper`` rows hold the figures as published (Wan 2.1 T2V
14B at 720p, against the dense video of the same seed), ``ours`` rows hold one harness run's (the
newest per model, resolution, schedule and backend). Our ``PSNR`` column is the mean of per-frame
PSNRs (``psnr_frames_db``, Sparse VideoGen's convention); our whole-video PSNR (``psnr_db``, the
headline the gate reads by default) is beside it, a column the papers leave empty. A paper row
sits just above the runs of its setting (same model, resolution and schedule); a paper row with no
run of ours below it names the experiment that makes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalharness.formatting import format_cell, markdown_table
from evalharness.metric_names import Metric
from reports.sources import ReportRun
from reports.table3 import harness_runs


@dataclass(frozen=True)
class PaperRow:
    """One published row: the paper, its setting in our names, the experiment that runs it
    (``conf/experiment/<experiment>.yaml``), and its PSNR (dB), SSIM, LPIPS and speedup."""

    paper: str
    model: str
    resolution: str
    schedule: str
    experiment: str
    psnr: float
    ssim: float
    lpips: float
    speedup: float


PAPER_ROWS = (
    PaperRow(
        "Sparse VideoGen", "wan2.1-t2v-14b", "720p", "svg_720p", "paper_svg_wan14b_720p",
        22.99, 0.785, 0.199, 1.58,
    ),
    PaperRow(
        "Sparse VideoGen 2", "wan2.1-t2v-14b", "720p", "svg2_720p", "paper_svg2_wan14b_720p",
        25.81, 0.854, 0.138, 1.60,
    ),
)  # fmt: skip
COLUMNS = (
    ("", "source", "{}"),
    ("model", "model", "{}"),
    ("resolution", "resolution", "{}"),
    ("method / schedule", "schedule", "{}"),
    ("PSNR ↑", "psnr", "{}"),
    ("SSIM ↑", "ssim", "{}"),
    ("LPIPS ↓", "lpips", "{}"),
    ("speedup", "speedup", "{}"),
    ("PSNR, whole video (ours)", "psnr_video", "{}"),
    ("run", "run", "{}"),
)


def _setting(run: ReportRun) -> tuple[str | None, ...]:
    return tuple(run.tags.get(key) for key in ("model", "resolution", "schedule"))


def _paper_row(paper: PaperRow) -> dict[str, Any]:
    return {
        "source": "paper",
        "model": paper.model,
        "resolution": paper.resolution,
        "schedule": f"{paper.paper} ({paper.schedule})",
        "psnr": f"{paper.psnr:.2f}",
        "ssim": f"{paper.ssim:.3f}",
        "lpips": f"{paper.lpips:.3f}",
        "speedup": f"{paper.speedup:.2f}x",
        "psnr_video": "-",
        "run": "published",
    }


def _our_row(run: ReportRun) -> dict[str, Any]:
    m = run.metrics
    return {
        "source": "ours",
        "model": run.tags.get("model"),
        "resolution": run.tags.get("resolution"),
        "schedule": run.tags.get("schedule"),
        "psnr": format_cell(m.get(Metric.PSNR_FRAMES_DB), "{:.2f}"),
        "ssim": format_cell(m.get(Metric.SSIM_FRAMES), "{:.3f}"),
        "lpips": format_cell(m.get(Metric.LPIPS), "{:.3f}"),
        "speedup": format_cell(m.get(Metric.SPEEDUP), "{:.2f}x"),
        "psnr_video": format_cell(m.get(Metric.PSNR_DB), "{:.2f}"),
        "run": f"{run.name} ({run.machine})",
    }


def _missing_row(paper: PaperRow) -> dict[str, Any]:
    command = f"python -m evalharness experiment={paper.experiment} model.checkpoint=..."
    row = {key: "-" for _, key, _ in COLUMNS}
    return {**row, "source": "ours", "schedule": paper.schedule, "run": f"none: `{command}`"}


def papers_rows(runs: Sequence[ReportRun]) -> list[dict[str, Any]]:
    """The table's rows: each paper row followed by our runs of its setting (or a row naming the
    experiment to run), then our other harness runs, one per schedule."""
    ours = harness_runs(runs)
    rows: list[dict[str, Any]] = []
    placed: set[str] = set()
    for paper in PAPER_ROWS:
        rows.append(_paper_row(paper))
        setting = (paper.model, paper.resolution, paper.schedule)
        matching = [run for run in ours if _setting(run) == setting]
        rows += [_our_row(run) for run in matching] or [_missing_row(paper)]
        placed.update(run.run_id for run in matching)
    rows += [_our_row(run) for run in ours if run.run_id not in placed]
    return rows


def papers_section(runs: Sequence[ReportRun]) -> list[str]:
    """The report's section, as Markdown lines."""
    return [
        "## In the papers' form: PSNR / SSIM / LPIPS / speedup",
        "",
        "Sparse VideoGen's table layout: each row against the dense video of the same seed. "
        "`paper`: as published (Wan 2.1 T2V 14B, 720p; speedup against the paper's dense "
        "attention on its GPU). `ours`: a harness run; PSNR is the mean of per-frame PSNRs "
        "(`psnr_frames_db`, Sparse VideoGen's convention), SSIM and AlexNet LPIPS the mean over "
        "frames (over pairs for a prompt suite), speedup against our fastest dense control; "
        "the whole-video PSNR (`psnr_db`) is ours alone.",
        "",
        markdown_table(papers_rows(runs), COLUMNS, escape=True),
        "",
    ]
