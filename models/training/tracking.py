"""Where a training run's curves go: MLflow (a run tagged ``run_kind=training``) or a callback.

``models`` imports nothing of the harness, so the run is logged through MLflow's own client; it
lands in the same store and experiment as the harness's runs by default (the sqlite database
``outputs/mlflow.db``, experiment ``evalharness``) and is told apart by its ``run_kind`` tag.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from models.interruption import Terminated, as_interruption
from models.uri_redaction import quiet_run_links

RUN_KIND = "training"
DEFAULT_TRACKING_URI = f"sqlite:///{Path('outputs').resolve() / 'mlflow.db'}"
DEFAULT_EXPERIMENT = "evalharness"


class MetricLogger(Protocol):
    """Receives a stage's metrics as training goes."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Records ``metrics`` at ``step``."""


class CallbackLogger:
    """Hands every metric to a function ``callback(name, value, step)`` (tests, notebooks)."""

    def __init__(self, callback: Callable[[str, float, int], None]) -> None:
        self._callback = callback

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Calls the callback once per metric."""
        for name, value in metrics.items():
            self._callback(name, float(value), step)


class MlflowLogger:
    """Logs to one active MLflow run (see :func:`mlflow_run`)."""

    def __init__(self, client, run_id: str) -> None:
        self._client = client
        self.run_id = run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One batch call per step."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        self._client.log_batch(self.run_id, metrics=batch)


@contextlib.contextmanager
def mlflow_run(
    tracking_uri: str, experiment: str, run_name: str, params: dict[str, str]
) -> Iterator[MlflowLogger]:
    """An MLflow run of kind ``training`` for the duration of the block (FAILED if it raises,
    KILLED on Ctrl-C)."""
    from mlflow import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    quiet_run_links()  # MLflow's "View run ... at: <URI>" would print a password in the URI
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(experiment_id, run_name=run_name, tags={"run_kind": RUN_KIND})
    run_id = run.info.run_id
    from mlflow.entities import Param

    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    status = "FINISHED"
    try:
        yield MlflowLogger(client, run_id)
    except (KeyboardInterrupt, Terminated):
        status = "KILLED"
        raise
    except BaseException as err:
        # A failure that followed a signal (a worker pool stopped by Ctrl-C) is the signal's.
        status = "KILLED" if as_interruption(err) is not err else "FAILED"
        raise
    finally:
        client.set_terminated(run_id, status=status)
