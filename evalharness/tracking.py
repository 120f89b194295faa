"""Experiment tracking behind one small interface: MLflow, or nothing.

The run loop only calls :class:`Tracker` methods, so tracking is never wired into the core loop, and
``logger=none`` runs the same code without a server or database.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """What the harness needs from a tracking backend."""

    run_id: str | None

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...
    def log_artifacts(self, folder: Path) -> None: ...
    def finish(self, status: str) -> None: ...


class NullTracker:
    """Tracks nothing; artifacts stay in the run folder."""

    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def log_artifacts(self, folder: Path) -> None:
        pass

    def finish(self, status: str) -> None:
        pass


def default_tracking_uri(output_root: str | Path) -> str:
    """Local sqlite database under the output folder (MLflow's own recommended local store)."""
    db = Path(output_root).resolve() / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


class MlflowTracker:
    """One MLflow run per comparison, through ``MlflowClient`` (no global active-run state).

    Args:
        tracking_uri: any MLflow tracking URI (sqlite, http server, ...).
        experiment_name: created on first use, with artifacts under ``artifact_root`` for local
            stores.
        run_name: the run's display name.
        artifact_root: artifact folder for a newly created experiment on a local store.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str,
        run_name: str,
        artifact_root: Path | None = None,
    ) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is None:
            location = None
            if artifact_root is not None and not tracking_uri.startswith("http"):
                location = (artifact_root.resolve() / experiment_name).as_uri()
            experiment_id = self.client.create_experiment(
                experiment_name, artifact_location=location
            )
        else:
            experiment_id = experiment.experiment_id
        self.experiment_id = experiment_id
        run = self.client.create_run(experiment_id, run_name=run_name)
        self.run_id: str | None = run.info.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_text(v)) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow caps params per batch call at 100
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step or 0)
            for k, v in metrics.items()
            if v is not None and _is_number(v)
        ]
        for start in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[start : start + 1000])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_artifacts(self, folder: Path) -> None:
        self.client.log_artifacts(self.run_id, str(folder))

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


def _param_text(value: Any) -> str:
    text = "None" if value is None else str(value)
    return text[:6000]  # MLflow's param value limit


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def finished_runs(client, experiment_name: str, max_results: int) -> list:
    """Finished MLflow runs of an experiment, newest first.

    Args:
        client: an ``MlflowClient``.
        experiment_name: the experiment.
        max_results: how many runs at most.

    Raises:
        LookupError: no such experiment.
    """
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        raise LookupError(f"no MLflow experiment named {experiment_name!r}")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string="attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=max_results,
    )
    return runs


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flattens a nested mapping to dotted keys, e.g. ``{"schedule": {"density": .3}}`` →
    ``{"schedule.density": .3}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def make_tracker(
    kind: str,
    *,
    tracking_uri: str | None,
    experiment_name: str,
    run_name: str,
    output_root: Path,
) -> Tracker:
    """Builds the tracker the config names (``mlflow`` or ``none``)."""
    if kind == "none":
        return NullTracker()
    if kind == "mlflow":
        uri = tracking_uri or default_tracking_uri(output_root)
        log.info("MLflow tracking at %s (experiment %r)", uri, experiment_name)
        return MlflowTracker(
            uri, experiment_name, run_name, artifact_root=output_root / "mlartifacts"
        )
    raise ValueError(f"logger.kind must be 'mlflow' or 'none', got {kind!r}")
