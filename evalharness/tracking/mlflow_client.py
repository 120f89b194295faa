"""Experiment tracking behind one small interface, :class:`Tracker`: MLflow, or nothing
(``logger=none`` runs the same code without a server or database).
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import logging
import os
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import jax
import numpy as np

from evalharness.exit_codes import Terminated, as_interruption
from evalharness.machine import machine_summary
from evalharness.metric_names import RANDOM_WEIGHTS, WEIGHTS
from evalharness.tracking.redaction import redacted
from evalharness.tracking.store import default_store_uri, open_client
from evalharness.tracking.ui_view import HEADLINE_VIEW_TAG, RUN_KIND_TAG, headline_view_state

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """What the harness needs from a tracking backend.

    ``tracking_uri`` (password hidden: only the tracker's client holds the URI it connects with)
    and ``run_id`` (None without tracking) let a run folder name the run, so a later start can
    close a run its killed process left open (:func:`~evalharness.tracking.ended.mark_run_ended`).
    """

    tracking_uri: str | None
    run_id: str | None

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Records the run's settings (flat names to values)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Records numeric metrics; ``step`` places them on a curve (frame, denoising step)."""

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Sets string tags (environment, gate verdict, error)."""

    def log_artifacts(self, folder: Path, exclude: Sequence[str] = ()) -> None:
        """Uploads a folder's files, except names matching a shell pattern of ``exclude``."""

    def finish(self, status: str) -> None:
        """Closes the run as ``FINISHED``, ``FAILED`` or ``KILLED``."""

    def child(self, run_name: str) -> Tracker:
        """A nested run under this one (a pair of a prompt suite), opened now."""


class NullTracker:
    """Tracks nothing (every method does nothing); artifacts stay in the run folder."""

    tracking_uri: str | None = None
    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, str]) -> None:
        pass

    def log_artifacts(self, folder: Path, exclude: Sequence[str] = ()) -> None:
        pass

    def finish(self, status: str) -> None:
        pass

    def child(self, run_name: str) -> NullTracker:
        return NullTracker()


@contextlib.contextmanager
def closed_on_error(tracker: Tracker) -> Iterator[Tracker]:
    """Closes ``tracker``'s run if the body raises (``KILLED`` on Ctrl-C or SIGTERM, else
    ``FAILED``, the exception in an ``error`` tag), then re-raises; on success the body closes it.
    A backend failing meanwhile (a server gone away) is only logged: the body's error came first.
    """
    try:
        yield tracker
    except BaseException as err:
        signalled = as_interruption(err)  # a failure after a signal is the signal's
        interrupted = isinstance(signalled, KeyboardInterrupt | Terminated)
        message = f"{type(err).__name__}: {err}"
        if interrupted:
            what = "KeyboardInterrupt" if isinstance(signalled, KeyboardInterrupt) else "SIGTERM"
            message = f"interrupted ({what})"
        try:
            tracker.set_tags({"error": message[:5000]})
            tracker.finish("KILLED" if interrupted else "FAILED")
        except Exception as tracking_err:  # noqa: BLE001 - the body's error is the one to raise
            log.warning("could not close run %s as failed: %s", tracker.run_id, tracking_err)
        raise


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def run_tags(cfg: Any) -> dict[str, str]:
    """What the MLflow UI's compare view groups runs by: ``model``, ``resolution``,
    ``schedule`` and the attention ``backend`` (as resolved for this host), and the run's kind."""
    return {
        "model": cfg.model.name,
        "resolution": cfg.resolution.name,
        "schedule": cfg.schedule.name,
        "backend": str(cfg.kernel.backend),
        RUN_KIND_TAG: "harness",
    }


def start_tags(cfg: Any, run_dir: Path, checkpoint: Mapping[str, str]) -> dict[str, str]:
    """A harness run's tags when it starts: the user's (and a multirun's sweep tags), then the
    environment, :func:`run_tags`, the checkpoint's (``checkpoint``), the run folder, a suite's
    prompts and seeds, ``weights=random`` on random weights, and a negative control; the
    harness's own win over the user's."""
    tags = {
        **cfg.logger.tags,
        **environment_tags(),
        **run_tags(cfg),
        **checkpoint,
        "run_dir": str(Path(run_dir).resolve()),
    }
    if cfg.prompts is not None or cfg.seeds is not None:
        tags["suite"] = f"prompts={cfg.prompts or 'prompt'} seeds={cfg.seeds or [cfg.seed]}"
    if cfg.model.random_weights:
        # Real speed, meaningless quality: the gate CLI refuses quality thresholds on it.
        tags[WEIGHTS] = RANDOM_WEIGHTS
    if cfg.negative_control.value != "none":
        # A deliberately broken sparse arm: the run must never be read as a schedule's result.
        tags["negative_control"] = cfg.negative_control.value
    return tags


def default_tracking_uri(output_root: str | Path) -> str:
    """Local sqlite database under the output folder (MLflow's own recommended local store),
    its folder created."""
    uri = default_store_uri(output_root)
    Path(output_root).resolve().mkdir(parents=True, exist_ok=True)
    return uri


def ensure_experiment(
    client: MlflowClient, experiment_name: str, artifact_root: Path | None = None
) -> str:
    """The experiment's id, created (and tagged as a model-development experiment) if missing.

    Created here, and read again when another process created it first, so several processes
    (a multirun's jobs) can start on one experiment.

    Args:
        client: a client of the tracking store.
        experiment_name: the experiment.
        artifact_root: artifact folder for a newly created experiment on a local store.
    """
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        location = None
        if artifact_root is not None and not client.tracking_uri.startswith("http"):
            location = (artifact_root.resolve() / experiment_name).as_uri()
        try:
            experiment_id = client.create_experiment(experiment_name, artifact_location=location)
        except Exception:
            # Another process created it between the lookup and the create.
            experiment = client.get_experiment_by_name(experiment_name)
            if experiment is None:
                raise
    if experiment is not None:
        experiment_id = experiment.experiment_id
    tags = {} if experiment is None else experiment.tags
    if EXPERIMENT_KIND_TAG not in tags:
        # MLflow 3 opens an experiment without this tag in its GenAI view; ours compares
        # model runs (metrics, params, artifacts), its "model development" view.
        _set_experiment_tag(client, experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    view = headline_view_state()
    if tags.get(HEADLINE_VIEW_TAG) != view:
        _set_experiment_tag(client, experiment_id, HEADLINE_VIEW_TAG, view)
    return experiment_id


def _set_experiment_tag(client: MlflowClient, experiment_id: str, key: str, value: str) -> None:
    """Sets an experiment tag that several processes may set at once: the second insert of a
    missing key fails on its primary key, so the loser reads the tag back, and sets it again
    (an update, now that the row exists) unless it already holds ``value``."""
    try:
        client.set_experiment_tag(experiment_id, key, value)
    except Exception:
        if client.get_experiment(experiment_id).tags.get(key) == value:
            return  # the other process wrote the same value
        client.set_experiment_tag(experiment_id, key, value)


class MlflowTracker:
    """One MLflow run per comparison, through ``MlflowClient`` (no global active-run state).

    Args:
        tracking_uri: any MLflow tracking URI (sqlite, http server, ...).
        experiment_name: created on first use.
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
        self._connect(tracking_uri, experiment_name, artifact_root)
        self.run_id: str | None = self.client.create_run(
            self.experiment_id, run_name=run_name
        ).info.run_id

    def _connect(self, tracking_uri: str, experiment_name: str, artifact_root: Path | None) -> None:
        """The client (a new store created once: ``store.open_client``) and the experiment."""
        self.client = open_client(tracking_uri)
        self.tracking_uri: str | None = redacted(tracking_uri)  # written down; the client connects
        self.experiment_id = ensure_experiment(self.client, experiment_name, artifact_root)

    def child(self, run_name: str) -> MlflowTracker:
        """A run nested under this one (``mlflow.parentRunId``): the UI lists a suite's pairs
        under their parent run."""
        nested = copy.copy(self)
        run = self.client.create_run(
            self.experiment_id, run_name=run_name, tags={"mlflow.parentRunId": self.run_id}
        )
        nested.run_id = run.info.run_id
        return nested

    def _log_batches(self, kind: str, items: list, size: int) -> None:
        for start in range(0, len(items), size):
            self.client.log_batch(self.run_id, **{kind: items[start : start + size]})

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Logs params in batches of 100 (MLflow's cap), each value cut to MLflow's 6000
        characters, passwords hidden (a tracking URI's among the config's params)."""
        from mlflow.entities import Param

        self._log_batches(
            "params", [Param(k, redacted(str(v))[:6000]) for k, v in params.items()], 100
        )

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Logs the numeric metrics in batches; None and non-numbers are skipped."""
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if _is_number(v)]
        self._log_batches("metrics", items, 1000)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Sets the tags, each value cut to MLflow's length limit, passwords hidden."""
        from mlflow.entities import RunTag

        items = [RunTag(k, redacted(str(v))[:5000]) for k, v in tags.items()]
        self.client.log_batch(self.run_id, tags=items)

    def log_artifacts(self, folder: Path, exclude: Sequence[str] = ()) -> None:
        """Uploads a folder's files, except those whose name or relative path matches a pattern
        of ``exclude``."""
        if not exclude:
            self.client.log_artifacts(self.run_id, str(folder))
            return
        for path in artifact_files(folder, exclude):
            parent = path.parent.relative_to(folder).as_posix()
            artifact_path = None if parent == "." else parent
            self.client.log_artifact(self.run_id, str(path), artifact_path=artifact_path)

    def finish(self, status: str) -> None:
        """Marks the run terminated with ``status``."""
        self.client.set_terminated(self.run_id, status=status)


def artifact_files(folder: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """Files under ``folder``, sorted, without those whose name or path relative to ``folder``
    matches a shell-style pattern of ``exclude`` (e.g. ``*.mp4``, ``pairs/*``)."""
    folder = Path(folder)

    def excluded(path: Path) -> bool:
        relative = path.relative_to(folder).as_posix()
        return any(fnmatch.fnmatch(path.name, p) or fnmatch.fnmatch(relative, p) for p in exclude)

    return sorted(path for path in folder.rglob("*") if path.is_file() and not excluded(path))


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def finished_runs(client: MlflowClient, experiment_name: str, max_results: int) -> list[Run]:
    """Finished top-level MLflow runs of an experiment, newest first (a suite's per-pair child
    runs are left out: their parent run carries the suite's result).

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
    runs: list[Run] = []
    page_token = None
    while len(runs) < max_results:
        page = client.search_runs(
            [experiment.experiment_id],
            filter_string="attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=max(max_results, 100),
            page_token=page_token,
        )
        runs += [r for r in page if "mlflow.parentRunId" not in r.data.tags]
        page_token = page.token
        if not page_token:
            break
    return runs[:max_results]


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
        log.info("MLflow tracking at %s (experiment %r)", redacted(uri), experiment_name)
        return MlflowTracker(
            uri, experiment_name, run_name, artifact_root=output_root / "mlartifacts"
        )
    raise ValueError(f"logger.kind must be 'mlflow' or 'none', got {kind!r}")


def git_commit() -> str:
    """The checked-out commit of the harness's repository, or ``unknown`` outside git."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def environment_tags() -> dict[str, str]:
    """Where and with what the run happened (MLflow tags)."""
    devices = jax.devices()
    return {
        "git_commit": git_commit(),
        "jax_version": jax.__version__,
        "device_kind": devices[0].device_kind,
        "device_platform": devices[0].platform,
        "device_count": str(len(devices)),
        "host": socket.gethostname(),
        "pid": str(os.getpid()),  # which process: a launcher's jobs each run in their own
        "machine": machine_summary(),
    }


def log_frame_curves(tracker: Tracker, psnr_db: np.ndarray, ssim: np.ndarray) -> None:
    """Per-frame PSNR and SSIM as metric histories (``psnr_frame_db``, ``ssim_frame``).

    Args:
        tracker: where to log.
        psnr_db: [frames] PSNR in dB.
        ssim: [frames] SSIM.
    """
    for i, value in enumerate(psnr_db):
        tracker.log_metrics({"psnr_frame_db": value, "ssim_frame": ssim[i]}, step=i)


def log_routing_curve(tracker: Tracker, per_cell: np.ndarray) -> None:
    """The temporal fraction per denoising step (``routing_temporal_fraction``, step = step).

    Args:
        tracker: where to log.
        per_cell: [steps, layers] temporal fraction, NaN where attention stayed dense; all-dense
            steps are skipped.
    """
    for step, row in enumerate(per_cell):
        if not np.isnan(row).all():
            tracker.log_metrics({"routing_temporal_fraction": float(np.nanmean(row))}, step=step)
