"""The runs a report is built from: finished MLflow runs, sorted by kind, with their provenance.

Kinds, from the tags the harness and the benchmarks set:

- ``harness``: a comparison of ``python -m evalharness`` (tag ``schedule``; a prompt suite's pairs
  are child runs and are left out, their parent carries the suite). Runs with a
  ``negative_control`` tag are deliberately broken and never count as a schedule's result.
- ``bench:<name>``: a benchmark table (tag ``bench``, see ``evalharness.bench.mlflow_record``).
- ``report``: an earlier report (tag ``report=true``), ignored.

A harness run that missed its gate may be closed ``FAILED`` in MLflow (so that a list of runs
shows it) while it measured everything: such runs (tag ``gate=failed``) are read with the
finished ones, since a verdict that left them out would show only the schedules that passed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalharness.tracking import finished_runs, redacted

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

REPORT_TAG = "report"
GATE_FAILED = "tags.gate = 'failed'"
# Tags that say where and with what a row was produced (``evalharness.tracking.mlflow_client.environment_tags``).
PROVENANCE_TAGS = ("host", "machine", "device_kind", "device_platform", "jax_version", "git_commit")


class ReportError(RuntimeError):
    """The report cannot be built from what was given; the message names the fix."""


@dataclass(frozen=True)
class ReportRun:
    """One finished MLflow run, flattened.

    Attributes:
        run_id: MLflow run id.
        name: the run's display name (or the id's first 8 characters).
        params: logged params.
        metrics: logged metrics (latest values).
        tags: tags.
        start_time: epoch milliseconds.
    """

    run_id: str
    name: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    start_time: int = 0
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """``report``, ``bench:<name>``, ``harness``, ``negative_control`` or ``other``."""
        if self.tags.get(REPORT_TAG) == "true":
            return "report"
        if "bench" in self.tags:
            return f"bench:{self.tags['bench']}"
        if "negative_control" in self.tags:
            return "negative_control"
        if "schedule" in self.tags:
            return "harness"
        return "other"

    def value(self, key: str) -> Any:
        """A metric, else a param, else a tag named ``key`` (None when none is)."""
        for source in (self.metrics, self.params, self.tags):
            if key in source:
                return source[key]
        return None

    @property
    def machine(self) -> str:
        """Where the row was produced: host, device kind and platform."""
        t = self.tags
        return (
            f"{t.get('host', '?')} ({t.get('device_kind', '?')}, {t.get('device_platform', '?')})"
        )

    @property
    def versions(self) -> str:
        """JAX version and short git commit."""
        commit = self.tags.get("git_commit", "?")[:10]
        return f"jax {self.tags.get('jax_version', '?')}, git {commit}"


def _as_report_run(run) -> ReportRun:
    return ReportRun(
        run_id=run.info.run_id,
        name=run.info.run_name or run.info.run_id[:8],
        params=dict(run.data.params),
        metrics=dict(run.data.metrics),
        tags=dict(run.data.tags),
        start_time=int(run.info.start_time or 0),
    )


def _gate_failed_runs(client: MlflowClient, experiment: str, max_runs: int) -> list:
    """Top-level runs closed ``FAILED`` because they missed their gate (tag ``gate=failed``)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = client.search_runs(
        [found.experiment_id],
        filter_string=f"attributes.status = 'FAILED' and {GATE_FAILED}",
        max_results=max_runs,
    )
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def _listed_runs(client: MlflowClient, run_ids: Sequence[str]) -> list:
    runs = []
    for run_id in run_ids:
        try:
            run = client.get_run(run_id)
        except Exception as err:  # MLflow raises its own exception types per store
            raise ReportError(
                f"no MLflow run {run_id!r} at {redacted(client.tracking_uri)}: check the id (the UI "
                "shows it under the run's name) and --tracking-uri"
            ) from err
        if run.info.lifecycle_stage == "deleted":
            raise ReportError(
                f"run {run_id} is deleted: restore it (`mlflow runs restore --run-id {run_id}`) "
                "or leave it out"
            )
        missed_gate = run.info.status == "FAILED" and run.data.tags.get("gate") == "failed"
        if run.info.status != "FINISHED" and not missed_gate:
            raise ReportError(f"run {run_id} is {run.info.status}, not FINISHED: leave it out")
        runs.append(run)
    return runs


def load_runs(
    client: MlflowClient,
    *,
    experiment: str | None = None,
    run_ids: Sequence[str] = (),
    max_runs: int = 500,
) -> list[ReportRun]:
    """Finished runs of an experiment (newest first, suite pairs left out; with the runs closed
    ``FAILED`` for a missed gate), or the listed runs.

    Raises:
        ReportError: no such experiment, an unknown or unfinished run id, or nothing to report.
    """
    if run_ids:
        runs = _listed_runs(client, run_ids)
    else:
        name = experiment or "evalharness"
        try:
            runs = finished_runs(client, name, max_runs)
        except LookupError as err:
            names = sorted(e.name for e in client.search_experiments())
            raise ReportError(
                f"{err} at {redacted(client.tracking_uri)}: pass --experiment NAME (experiments there: "
                f"{', '.join(names) or 'none'}) or --tracking-uri of the store the runs went to"
            ) from None
        runs += _gate_failed_runs(client, name, max_runs)
    out = [_as_report_run(r) for r in runs]
    out = [r for r in out if r.kind != "report"]
    if not out:
        where = f"experiment {experiment!r}" if not run_ids else "the listed runs"
        raise ReportError(
            f"{where} has no finished runs: run `python -m evalharness` or a benchmark with "
            "--mlflow first"
        )
    return out


def of_kind(runs: Sequence[ReportRun], kind: str) -> list[ReportRun]:
    """The runs of one kind, newest first."""
    return sorted((r for r in runs if r.kind == kind), key=lambda r: -r.start_time)


class Artifacts:
    """Downloads run artifacts once each into a temporary folder (closed with the object)."""

    def __init__(self, client: MlflowClient) -> None:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        self.client = client
        self._tmp = tempfile.TemporaryDirectory(prefix="reports-artifacts-")

    def path(self, run: ReportRun, name: str) -> Path | None:
        """The local copy of artifact ``name`` of ``run``, or None when the run has none."""
        key = f"artifact:{name}"
        if key not in run.cache:
            folder = Path(self._tmp.name) / run.run_id
            folder.mkdir(exist_ok=True)
            try:
                local = self.client.download_artifacts(run.run_id, name, str(folder))
            except Exception:  # missing artifact: MLflow raises per-store exception types
                local = None
            run.cache[key] = Path(local) if local else None
        return run.cache[key]

    def json(self, run: ReportRun, name: str) -> dict[str, Any] | None:
        """A JSON artifact parsed, or None."""
        path = self.path(run, name)
        return json.loads(path.read_text()) if path and path.is_file() else None

    def close(self) -> None:
        """Removes the downloads."""
        self._tmp.cleanup()
