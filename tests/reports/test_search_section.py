"""The report's schedule-search section, from fake runs as MLflow gives them: the search parents
(tag ``run_kind=search``) newest first, at most ``MAX_SEARCHES``, each with its recommendation (or
the lack of one), the named schedules its front does not dominate, its figure copied beside the
report and its front table; nothing at all when the experiment holds no search."""

from __future__ import annotations

import json
from pathlib import Path

from evalharness.tracking import RUN_KIND_TAG, SEARCH_KIND
from reports.search_section import MAX_SEARCHES, search_runs, search_section
from reports.sources import ReportRun

FRONT = (
    "| trial | speedup | psnr_db_mean | feasible |\n|---|---|---|---|\n| 4 | 1.31 | 33.1 | yes |"
)


class FakeArtifacts:
    """``reports.sources.Artifacts`` over local folders: ``<root>/<run_id>/<name>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, run: ReportRun, name: str) -> Path | None:
        path = self.root / run.run_id / name
        return path if path.exists() else None

    def json(self, run: ReportRun, name: str) -> dict | None:
        path = self.path(run, name)
        return json.loads(path.read_text()) if path else None


def _search(root: Path, run_id: str, start: int, summary: dict | None, **tags: str) -> ReportRun:
    """A search parent with ``summary.json`` (when given), ``front.md`` and ``front.png``."""
    folder = root / run_id
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "front.md").write_text(FRONT + "\n")
    (folder / "front.png").write_bytes(b"\x89PNG fake")
    all_tags = {RUN_KIND_TAG: SEARCH_KIND, "search": run_id, **tags}
    return ReportRun(run_id, run_id, {}, {"best_speedup": 1.31}, all_tags, start)


def test_each_search_shows_its_recommendation_figure_and_front(tmp_path: Path):
    root, figures = tmp_path / "artifacts", tmp_path / "figures"
    figures.mkdir()
    found = {
        "psnr_metric": "psnr_db_mean",
        "recommended": {
            "trial": 4,
            "speedup": 1.3104,
            "psnr": 33.123,
            "knobs": {"density": 0.25, "variant": "b3"},
        },
        "references_not_covered": [],
    }
    old = _search(root, "old-search", 10, found, recommended_schedule="searched-old")
    none = {"trials": 5, "recommended": None, "references_not_covered": ["balanced"]}
    new = _search(root, "new search", 20, none)
    harness = ReportRun("r", "r", {}, {"speedup": 1.2}, {"schedule": "aggressive"}, 30)
    runs = [old, harness, new]
    assert [r.run_id for r in search_runs(runs)] == ["new search", "old-search"]

    lines = search_section(runs, FakeArtifacts(root), figures)
    text = "\n".join(lines)
    assert lines[0] == "## Schedule search"
    assert text.index("### new search") < text.index("### old-search")  # newest first
    assert "No trial of 5 met every threshold." in text
    assert "Named schedules the front does not dominate: balanced." in text
    assert (
        "Recommended: trial 4, speedup 1.310x, psnr_db_mean 33.12 dB (density=0.25 variant=b3); "
        "its schedule file is the run's artifact `conf/schedule/searched-old.yaml`."
    ) in text
    # Each figure is copied beside the report under a safe name, and linked.
    assert (figures / "search-new_search.png").read_bytes() == b"\x89PNG fake"
    assert "](figures/search-new_search.png)" in text and "](figures/search-old-search.png)" in text
    assert text.count(FRONT) == 2


def test_no_search_no_section_and_only_the_newest_are_shown(tmp_path: Path):
    root, figures = tmp_path / "artifacts", tmp_path / "figures"
    figures.mkdir()
    harness = ReportRun("r", "r", {}, {"speedup": 1.2}, {"schedule": "aggressive"}, 1)
    assert search_section([harness], FakeArtifacts(root), figures) == []
    searches = [_search(root, f"s{i}", i, None) for i in range(MAX_SEARCHES + 2)]
    text = "\n".join(search_section(searches, FakeArtifacts(root), figures))
    shown = [f"s{i}" for i in range(MAX_SEARCHES + 2) if f"### s{i}\n" in text + "\n"]
    assert shown == [f"s{i}" for i in range(2, MAX_SEARCHES + 2)]
    # A search without summary.json (interrupted before its first answer) still shows its front.
    assert "No trial of ? met every threshold." in text and FRONT in text
