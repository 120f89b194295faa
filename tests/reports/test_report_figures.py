"""Report figures from logged metrics, without a server: a stand-in client serves the histories."""

from __future__ import annotations

import math

from mlflow.entities import Metric

from reports import figures
from reports.sources import ReportRun


class _Histories:
    """The one client call the per-frame figure makes: a run's ``psnr_frame_db`` history."""

    def __init__(self, values: dict[str, list[float]]) -> None:
        self.values = values

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        assert key == "psnr_frame_db"
        return [Metric(key, v, 0, step) for step, v in enumerate(self.values[run_id])]


def _run(run_id: str, schedule: str) -> ReportRun:
    return ReportRun(run_id, run_id, {}, {}, {"schedule": schedule, "resolution": "cpu"})


def test_frame_psnr_says_which_frames_are_identical_and_where_they_are_drawn(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: saved.append(fig) or path)
    client = _Histories({"a": [math.inf, math.inf, math.inf], "b": [50.0, math.inf, 40.0]})
    runs = [_run("a", "dense"), _run("b", "balanced")]
    figures.frame_psnr_figure(client, runs, tmp_path / "f.png")
    (fig,) = saved
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == [
        "dense @ cpu (3 identical frames, inf, drawn at the top)",
        "balanced @ cpu (1 identical frame, inf, drawn at the top)",
    ]
    top = ax.get_lines()[0].get_ydata()
    assert list(top) == [53.0] * 3  # 3 dB above the highest finite frame
    assert list(ax.get_lines()[1].get_ydata()) == [50.0, 53.0, 40.0]
