"""Hydra callback that prints one table per multirun: speedup and PSNR per job, read back from MLflow.

Jobs may run in other processes (``hydra/launcher=submitit_local`` or ``submitit_slurm``), so
nothing is passed in memory: the multirun's start writes a fresh sweep id to
``<sweep dir>/sweep_id``, each job tags its MLflow run ``sweep=<id>`` and ``sweep_job=<n>``, and
the end reads those runs back (with ``logger=none``, the line each job appended to
``<sweep dir>/summary.jsonl``), prints the table, writes ``summary.md`` and remembers the jobs
that failed their gate or did not finish (the command's exit code 1).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from evalharness.admission import dry_run_table
from evalharness.evidence import headline_columns
from evalharness.formatting import markdown_table
from evalharness.tracking import (
    TrackingUnavailable,
    check_tracking,
    default_tracking_uri,
    ensure_experiment,
    open_client,
    redacted,
)

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.jsonl"
SWEEP_ID_FILE = "sweep_id"
SWEEP_TAG = "sweep"
SWEEP_JOB_TAG = "sweep_job"
HYDRA_MULTIRUN_FILE = "multirun.yaml"  # Hydra's copy of the sweep's config, overrides included

_failed: list[str] = []


def append_summary(sweep_dir: str | Path, row: dict[str, Any]) -> None:
    """Appends one job's headline metrics to the sweep's summary file (one ``write`` per line,
    so jobs in separate processes do not interleave their lines)."""
    path = Path(sweep_dir) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def record_unfinished_job(
    sweep_dir: str | Path, job_num: int, schedule: str | None, code: int
) -> None:
    """Appends the row of a job that ended without results (refused: exit 2; failed: 4) to the
    sweep's summary file, so the sweep's tables list every job (a refused job has no MLflow
    run to read back)."""
    ending = {2: "REFUSED", 4: "FAILED"}.get(code, "ENDED")
    status = f"{ending} (exit {code})"
    row = {SWEEP_JOB_TAG: job_num, "schedule": schedule, "status": status}
    append_summary(sweep_dir, {**row, "verdict": status.lower()})


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the jobs' headline metrics, job number first, status last."""
    columns = [("job", SWEEP_JOB_TAG, "{}"), *headline_columns(), ("status", "status", "{}")]
    return markdown_table(rows, columns)


def read_sweep_id(sweep_dir: str | Path) -> str:
    """The id the multirun's callback wrote for this sweep.

    Raises:
        FileNotFoundError: no id in ``sweep_dir`` (the message says what to configure).
    """
    path = Path(sweep_dir) / SWEEP_ID_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the multirun's callback evalharness.comparison.sweep.SweepSummary writes it "
            "when the sweep starts; keep it in hydra.callbacks, and give jobs on other machines "
            "the sweep folder on a shared file system (hydra.sweep.dir)"
        )
    return path.read_text().strip()


def tag_sweep_job(cfg: DictConfig, sweep_dir: str | Path, job_num: int) -> str:
    """Adds ``sweep`` and ``sweep_job`` to ``cfg.logger.tags``; returns the sweep id."""
    sweep_id = read_sweep_id(sweep_dir)
    with open_dict(cfg):
        tags = {str(k): str(v) for k, v in (cfg.logger.get("tags") or {}).items()}
        tags.update({SWEEP_TAG: sweep_id, SWEEP_JOB_TAG: str(job_num)})
        cfg.logger.tags = tags
    return sweep_id


def job_row(run: Run) -> dict[str, Any]:
    """A job's row of the sweep table from its MLflow run: each headline key from the run's
    metrics, else its tags, else its params; plus the job number, run folder and status."""
    data = run.data
    sources = (data.metrics, data.tags, data.params)
    row = {
        key: next((source[key] for source in sources if key in source), None)
        for _, key, _ in headline_columns()
    }
    row[SWEEP_JOB_TAG] = int(data.tags.get(SWEEP_JOB_TAG, -1))
    row["run_dir"] = data.tags.get("run_dir")
    row["gate_passed"] = data.metrics.get("gate_passed")
    row["status"] = run.info.status
    row["run_id"] = run.info.run_id
    return row


def mlflow_rows(tracking_uri: str, experiment: str, sweep_id: str) -> list[dict[str, Any]]:
    """The rows of every top-level run tagged ``sweep=<sweep_id>``, by job number.

    Raises:
        LookupError: the experiment does not exist at ``tracking_uri``.
    """
    client = open_client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment {experiment!r} at {redacted(tracking_uri)}")
    runs = client.search_runs(
        [found.experiment_id], filter_string=f"tags.{SWEEP_TAG} = '{sweep_id}'", max_results=5000
    )
    rows = [job_row(r) for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return sorted(rows, key=lambda r: r[SWEEP_JOB_TAG])


def failed_jobs() -> list[str]:
    """Jobs of the last multirun in this process that missed their gate or did not finish."""
    return list(_failed)


def _tracking_uri(config: DictConfig) -> str:
    return config.logger.tracking_uri or default_tracking_uri(config.output_root)


class SweepSummary(Callback):
    """Starts each multirun with a sweep id and prints the per-job table when it ends."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Writes a new sweep id and drops the summary file a previous sweep left there."""
        folder = Path(config.hydra.sweep.dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SUMMARY_FILE).unlink(missing_ok=True)
        sweep_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        (folder / SWEEP_ID_FILE).write_text(sweep_id + "\n")
        _failed.clear()
        if config.logger.kind == "mlflow" and not config.dry_run:  # a dry run logs nothing
            # The store's tables and the experiment exist before jobs in several processes
            # open it at once (a fresh sqlite database would race on its schema migration).
            # A wrong server or database is refused in seconds, before any job starts: exit 2,
            # as a single run's refusal (a SystemExit passes through Hydra's error report).
            try:
                check_tracking("mlflow", config.logger.tracking_uri, config.logger.experiment_name)
            except TrackingUnavailable as refusal:
                print(f"error: {refusal}", file=sys.stderr, flush=True)
                sys.exit(2)
            client = open_client(_tracking_uri(config))
            root = Path(config.output_root) / "mlartifacts"
            ensure_experiment(client, config.logger.experiment_name, root)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Hides the tracking URI's password in Hydra's ``multirun.yaml``, which Hydra writes
        after the multirun's start and before its first job."""
        if config.hydra.mode == RunMode.MULTIRUN:
            redact_file(Path(config.hydra.sweep.dir) / HYDRA_MULTIRUN_FILE)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Prints the table of the jobs' rows, writes ``summary.md`` and records failed jobs."""
        folder = Path(config.hydra.sweep.dir)
        redact_file(folder / HYDRA_MULTIRUN_FILE)  # a launcher whose jobs ran elsewhere
        if config.dry_run:
            _print_dry_runs(folder)
            return
        if config.logger.kind == "mlflow":
            sweep_id = read_sweep_id(folder)
            uri = _tracking_uri(config)
            rows = mlflow_rows(uri, config.logger.experiment_name, sweep_id)
            source = f"MLflow {redacted(uri)}, tag {SWEEP_TAG}={sweep_id}"
            tracked = {row[SWEEP_JOB_TAG] for row in rows}
            # Jobs refused before their MLflow run was made wrote their row to the file.
            unfinished = [r for r in _summary_rows(folder) if r.get(SWEEP_JOB_TAG) not in tracked]
            rows = sorted([*rows, *unfinished], key=lambda r: r.get(SWEEP_JOB_TAG, -1))
            source += f" and {folder / SUMMARY_FILE}" if unfinished else ""
        else:
            rows = sorted(_summary_rows(folder), key=lambda r: r.get(SWEEP_JOB_TAG, -1))
            source = str(folder / SUMMARY_FILE)
        if not rows:
            log.warning("no job of this multirun recorded a result (%s)", source)
            return
        table = summary_table(rows)
        (folder / "summary.md").write_text(table + "\n")
        print(f"\nMultirun summary ({len(rows)} jobs, from {source}):\n{table}\n", flush=True)
        for row in rows:
            if row.get("status", "FINISHED") != "FINISHED" or row.get("gate_passed") == 0:
                _failed.append(f"job {row.get(SWEEP_JOB_TAG)} ({row.get('schedule')})")
        if _failed:
            print("failed (gate or run): " + ", ".join(_failed), flush=True)


def redact_file(path: Path) -> None:
    """Rewrites ``path`` (atomically) with every URI's password hidden, if it holds one."""
    try:
        text = path.read_text()
    except OSError:
        return
    shown = redacted(text)
    if shown != text:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(shown)
        tmp.replace(path)


def _summary_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows the jobs appended to the sweep's summary file (:func:`append_summary`)."""
    path = folder / SUMMARY_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.strip()]


def _print_dry_runs(folder: Path) -> None:
    """A dry-run sweep's table (each job wrote its line): fit, time and the seed's figures."""
    path = folder / SUMMARY_FILE
    rows = _summary_rows(folder)
    if not rows:
        log.warning("no dry run of this multirun planned a job (%s)", path)
        return
    table = dry_run_table(rows)
    (folder / "summary.md").write_text(table + "\n")
    print(f"\nDry-run sweep ({len(rows)} jobs, from {path}):\n{table}\n", flush=True)
