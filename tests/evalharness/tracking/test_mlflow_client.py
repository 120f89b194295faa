"""Tracking: artifact uploads that leave videos out, environment tags, per-step curves, runs
closed as failed when their body raises."""

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from evalharness.evidence.run_folder import VIDEO_PATTERNS
from evalharness.tracking.mlflow_client import (
    MlflowTracker,
    NullTracker,
    artifact_files,
    closed_on_error,
    default_tracking_uri,
    environment_tags,
    log_routing_curve,
)


def _run_folder(tmp_path):
    folder = tmp_path / "run"
    (folder / "sub").mkdir(parents=True)
    for name in ("dense.mp4", "sparse.mp4", "metrics.json", "report.md", "sub/plot.png"):
        (folder / name).write_text(name)
    return folder


def test_artifact_files_skip_excluded_names(tmp_path):
    folder = _run_folder(tmp_path)
    names = {p.relative_to(folder).as_posix() for p in artifact_files(folder, VIDEO_PATTERNS)}
    assert names == {"metrics.json", "report.md", "sub/plot.png"}
    assert len(artifact_files(folder)) == 5


def test_mlflow_upload_without_videos_keeps_everything_else(tmp_path):
    folder = _run_folder(tmp_path)
    uri = default_tracking_uri(tmp_path / "outputs")
    client = MlflowClient(uri)
    uploads = {}
    for exclude in ((), VIDEO_PATTERNS):
        tracker = MlflowTracker(uri, "uploads", "run", artifact_root=tmp_path / "mlartifacts")
        tracker.log_artifacts(folder, exclude=exclude)
        tracker.finish("FINISHED")
        top = {a.path for a in client.list_artifacts(tracker.run_id)}
        nested = {a.path for a in client.list_artifacts(tracker.run_id, "sub")}
        uploads[exclude] = top | nested
    assert uploads[()] == {
        "dense.mp4",
        "sparse.mp4",
        "metrics.json",
        "report.md",
        "sub",
        "sub/plot.png",
    }
    assert uploads[VIDEO_PATTERNS] == {"metrics.json", "report.md", "sub", "sub/plot.png"}
    assert {p.name for p in folder.iterdir()} >= {"dense.mp4", "sparse.mp4"}  # files stay


def test_environment_tags_name_the_devices_and_commit():
    tags = environment_tags()
    assert set(tags) == {
        "git_commit",
        "jax_version",
        "device_kind",
        "device_platform",
        "device_count",
        "host",
        "pid",
        "machine",
    }
    assert tags["device_platform"] == "cpu" and tags["git_commit"]


class _Recorder(NullTracker):
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))


def test_routing_curve_skips_all_dense_steps():
    tracker = _Recorder()
    per_cell = np.array([[np.nan, np.nan], [0.5, np.nan], [0.25, 0.75]])
    log_routing_curve(tracker, per_cell)
    assert tracker.logged == [
        (1, {"routing_temporal_fraction": 0.5}),
        (2, {"routing_temporal_fraction": 0.5}),
    ]


class _RecordingTracker(NullTracker):
    """Remembers tags and the closing status; optionally fails like a server gone away."""

    run_id = "r1"

    def __init__(self, broken: bool = False) -> None:
        self.tags: dict[str, str] = {}
        self.status: str | None = None
        self.broken = broken

    def set_tags(self, tags):
        if self.broken:
            raise ConnectionError("tracking server unreachable")
        self.tags.update(tags)

    def finish(self, status):
        self.status = status


def test_closed_on_error_marks_failed_with_the_error_and_reraises():
    tracker = _RecordingTracker()
    with pytest.raises(ValueError, match="bad shape"), closed_on_error(tracker):
        raise ValueError("bad shape")
    assert tracker.status == "FAILED"
    assert tracker.tags["error"] == "ValueError: bad shape"


def test_closed_on_error_marks_killed_on_interrupt():
    tracker = _RecordingTracker()
    with pytest.raises(KeyboardInterrupt), closed_on_error(tracker):
        raise KeyboardInterrupt
    assert tracker.status == "KILLED"
    assert "interrupted" in tracker.tags["error"]


def test_closed_on_error_leaves_a_successful_run_open_for_its_owner():
    tracker = _RecordingTracker()
    with closed_on_error(tracker):
        pass
    assert tracker.status is None and tracker.tags == {}


def test_closed_on_error_keeps_the_first_error_when_tracking_fails_too():
    tracker = _RecordingTracker(broken=True)
    with pytest.raises(RuntimeError, match="out of memory"), closed_on_error(tracker):
        raise RuntimeError("out of memory")
