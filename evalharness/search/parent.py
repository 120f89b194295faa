"""The search's MLflow parent run: every trial's run is nested under it (tag
``mlflow.parentRunId``), and it holds the front table and figure, the recommended schedule's file,
``search.json`` and the study's storage location.

A resumed search reopens the same parent (its id is a study attribute), so one parent holds every
trial of a study however many times it was resumed. Without tracking (``logger=none``) the
parent is :class:`NoParent` and the files stay in the study's folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalharness.exit_codes import signals_deferred
from evalharness.tracking import (
    RUN_KIND_TAG,
    SEARCH_KIND,
    default_tracking_uri,
    ensure_experiment,
    environment_tags,
    open_client,
    redacted,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


class NoParent:
    """No tracking: nothing is logged, trials are not nested."""

    run_id: str | None = None
    tracking_uri: str | None = None

    def start(self, run_name: str, run_id: str | None) -> None:
        """Nothing to open."""

    def log(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Ignores them."""

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Ignores them."""

    def log_files(self, folder: Path) -> None:
        """Leaves them in the folder."""

    def finish(self, status: str) -> None:
        """Nothing to close."""


class ParentRun:
    """The parent run in an MLflow experiment, new or reopened by :meth:`start`.

    Args:
        tracking_uri: the tracking store (the run's ``logger.tracking_uri``, or the default
            sqlite database under ``output_root``).
        experiment_name: the run's experiment (the trials' runs go to the same one).
        artifact_root: artifact folder of a newly created experiment on a local store.
    """

    def __init__(self, tracking_uri: str, experiment_name: str, artifact_root: Path) -> None:
        self.client: MlflowClient = open_client(tracking_uri)
        self.tracking_uri: str | None = redacted(tracking_uri)  # written down; the client connects
        self.experiment_id = ensure_experiment(self.client, experiment_name, artifact_root)
        self.run_id: str | None = None

    def start(self, run_name: str, run_id: str | None) -> None:
        """Creates the parent, or reopens ``run_id`` (a resumed study), and keeps its id.

        Ctrl-C and SIGTERM wait until the id is kept, so that whoever closes the parent on an
        interruption finds it: a parent is never left RUNNING.

        Args:
            run_name: the display name of a new parent (the study's name).
            run_id: a parent to reopen, or None for a new one.
        """
        tags = {k: redacted(str(v))[:5000] for k, v in environment_tags().items()}
        tags[RUN_KIND_TAG] = SEARCH_KIND
        with signals_deferred():
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
                return
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
            self.run_id = run.info.run_id

    def log(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Logs params (only those not logged yet: MLflow refuses to change one) and metrics."""
        from mlflow.entities import Metric, Param

        known = self.client.get_run(self.run_id).data.params
        items = [Param(k, redacted(str(v))[:6000]) for k, v in params.items() if k not in known]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])
        rows = [Metric(k, float(v), 0, 0) for k, v in metrics.items() if v is not None]
        if rows:
            self.client.log_batch(self.run_id, metrics=rows)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Sets tags (values cut to MLflow's limit, passwords hidden)."""
        from mlflow.entities import RunTag

        items = [RunTag(k, redacted(str(v))[:5000]) for k, v in tags.items()]
        self.client.log_batch(self.run_id, tags=items)

    def log_files(self, folder: Path) -> None:
        """Uploads the study folder's files, except Optuna's database (a live file) and a
        schedule file being written."""
        for path in sorted(folder.rglob("*")):
            live = path.name.startswith("optuna.db") or path.suffix == ".partial"
            if path.is_file() and not live:
                parent = path.parent.relative_to(folder).as_posix()
                self.client.log_artifact(
                    self.run_id, str(path), artifact_path=None if parent == "." else parent
                )

    def finish(self, status: str) -> None:
        """Closes the run as ``FINISHED``, ``FAILED`` or ``KILLED``."""
        self.client.set_terminated(self.run_id, status=status)


def open_parent(
    kind: str, tracking_uri: str | None, experiment_name: str, output_root: Path
) -> ParentRun | NoParent:
    """The parent run the logger names (``mlflow`` or ``none``), connected, not yet started."""
    if kind == "none":
        return NoParent()
    uri = tracking_uri or default_tracking_uri(output_root)
    return ParentRun(uri, experiment_name, output_root / "mlartifacts")
