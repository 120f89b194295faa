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
from typing import Any

from evalharness.exit_codes import signals_deferred
from evalharness.tracking import (
    RUN_KIND_TAG,
    SEARCH_KIND,
    MlflowTracker,
    default_tracking_uri,
    environment_tags,
)


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


class ParentRun(MlflowTracker):
    """The parent run in an MLflow experiment, new or reopened by :meth:`start`; it logs, tags
    and uploads as every harness run does (``MlflowTracker``: batches, MLflow's length limits,
    passwords hidden).

    Args:
        tracking_uri: the tracking store (the run's ``logger.tracking_uri``, or the default
            sqlite database under ``output_root``).
        experiment_name: the run's experiment (the trials' runs go to the same one).
        artifact_root: artifact folder of a newly created experiment on a local store.
    """

    def __init__(self, tracking_uri: str, experiment_name: str, artifact_root: Path) -> None:
        self._connect(tracking_uri, experiment_name, artifact_root)
        self.run_id = None

    def start(self, run_name: str, run_id: str | None) -> None:
        """Creates the parent, or reopens ``run_id`` (a resumed study), and keeps its id.

        Ctrl-C and SIGTERM wait until the id is kept, so that whoever closes the parent on an
        interruption finds it: a parent is never left RUNNING.

        Args:
            run_name: the display name of a new parent (the study's name).
            run_id: a parent to reopen, or None for a new one.
        """
        with signals_deferred():
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
                return
            tags = {RUN_KIND_TAG: SEARCH_KIND}
            self.run_id = self.client.create_run(
                self.experiment_id, run_name=run_name, tags=tags
            ).info.run_id
            self.set_tags(environment_tags())

    def log(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Logs params (only those not logged yet: MLflow refuses to change one) and metrics."""
        known = self.client.get_run(self.run_id).data.params
        self.log_params({k: v for k, v in params.items() if k not in known})
        self.log_metrics(metrics)

    def log_files(self, folder: Path) -> None:
        """Uploads the study folder's files, except Optuna's database (a live file) and a
        schedule file being written."""
        self.log_artifacts(folder, exclude=("optuna.db*", "*.partial"))


def open_parent(
    kind: str, tracking_uri: str | None, experiment_name: str, output_root: Path
) -> ParentRun | NoParent:
    """The parent run the logger names (``mlflow`` or ``none``), connected, not yet started."""
    if kind == "none":
        return NoParent()
    uri = tracking_uri or default_tracking_uri(output_root)
    return ParentRun(uri, experiment_name, output_root / "mlartifacts")
