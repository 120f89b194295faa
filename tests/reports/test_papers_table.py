"""The papers' table: each published row beside our runs of its setting, never mixed."""

from evalharness.formatting import markdown_text
from reports.papers_table import PAPER_ROWS, papers_rows, papers_section
from reports.sources import ReportRun

METRICS = {
    "psnr_db": 24.1,
    "psnr_frames_db": 25.3,
    "ssim_frames": 0.8123,
    "lpips": 0.1511,
    "speedup": 1.41,
}


def _run(run_id: str, schedule: str, model: str = "wan2.1-t2v-14b", start: int = 0) -> ReportRun:
    tags = {"schedule": schedule, "model": model, "resolution": "720p", "backend": "pallas_tpu"}
    return ReportRun(run_id, run_id, {}, dict(METRICS), tags, start)


def test_a_paper_row_sits_above_our_run_of_its_setting():
    runs = [_run("svg-run", "svg_720p"), _run("other", "balanced", model="tiny")]
    rows = papers_rows(runs)
    assert [(r["source"], r["run"].split(" ")[0]) for r in rows] == [
        ("paper", "published"),
        ("ours", "svg-run"),
        ("paper", "published"),
        ("ours", "none:"),
        ("ours", "other"),
    ]
    paper, ours = rows[0], rows[1]
    assert (paper["psnr"], paper["ssim"], paper["lpips"], paper["speedup"]) == (
        "22.99",
        "0.785",
        "0.199",
        "1.58x",
    )
    # Ours: the per-frame PSNR mean in the paper's column, our whole-video PSNR beside it alone.
    assert (ours["psnr"], ours["ssim"], ours["lpips"], ours["speedup"]) == (
        "25.30",
        "0.812",
        "0.151",
        "1.41x",
    )
    assert ours["psnr_video"] == "24.10" and paper["psnr_video"] == "-"
    assert f"experiment={PAPER_ROWS[1].experiment}" in rows[3]["run"]


def test_the_section_is_one_markdown_table_with_the_papers_columns():
    lines = papers_section([_run("svg2-run", "svg2_720p")])
    table = [line for text in lines for line in text.splitlines() if line.startswith("|")]
    assert table[0].startswith("|  | model | resolution | method / schedule | PSNR ↑ | SSIM ↑")
    assert len(table) == 2 + 4  # header, rule, two paper rows, a missing run and ours
    assert any(markdown_text("svg2-run") in line and "| ours |" in line for line in table)
