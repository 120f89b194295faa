"""``python -m evalharness``: a matched dense-vs-sparse comparison configured by Hydra.

With no arguments it runs the embedded default (the trained tiny model at the CPU preset, balanced
schedule). Every ending is its exit code (``evalharness.exit_codes``: 0 done, 1 a missed gate, 2
refused before any work, 3 a dry run over ``max_minutes``, 4 failed while running, 130 / 143
interrupted); each failure ends with one ``error:`` line and no traceback, except a failure nobody
foresaw (a bug), whose traceback is kept. In a multirun every job runs; the sweep exits with the
worst code of its jobs (4, 2, 3, then 1).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from evalharness import exit_codes
from evalharness.admission import check_writable, plan_dry_run
from evalharness.comparison import (
    SWEEP_JOB_TAG,
    append_summary,
    failed_jobs,
    record_unfinished_job,
    tag_sweep_job,
)
from evalharness.config import check_overrides, multirun_first, prompt_aliases, register_configs
from evalharness.evidence import headline_row
from evalharness.exit_codes import RunFailed
from evalharness.metric_names import Metric, RunMetrics
from evalharness.refusal import CONFIG_ERRORS, PreflightRefusal
from evalharness.run import GateFailed, run
from evalharness.tracking import multihost, redact_logs, redacted

log = logging.getLogger("evalharness")
register_configs()
redact_logs()  # Hydra logs a multirun's overrides, logger.tracking_uri's password among them
# The folders Hydra creates itself, before the job: a run's and a multirun's.
HYDRA_FOLDERS = ("hydra.run.dir", "hydra.sweep.dir")
_failed_gates: list[str] = []
_job_codes: list[int] = []


def _end(code: int, message: str, multirun: bool, cfg: DictConfig) -> None:
    """One ``error:`` line (a URI's password hidden); in a multirun the sweep goes on, the job
    has its row in the sweep's table, and the sweep exits with the worst code."""
    print(f"error: {redacted(message)}", file=sys.stderr, flush=True)
    if not multirun:
        sys.exit(code)
    if HydraConfig.initialized():  # not when called outside Hydra's app (a library call)
        hydra_cfg = HydraConfig.get()
        schedule = (cfg.get("schedule") or {}).get("name")
        record_unfinished_job(hydra_cfg.sweep.dir, hydra_cfg.job.num, schedule, code)
    _job_codes.append(code)


def _run_job(cfg: DictConfig, multirun: bool) -> RunMetrics | None:
    """The run, with each way it can end turned into its exit code (module docstring)."""
    try:
        return run(cfg)
    except PreflightRefusal as refusal:
        _end(exit_codes.REFUSED, str(refusal), multirun, cfg)
    except GateFailed as failure:
        print(f"error: {failure}", file=sys.stderr)
        _failed_gates.append(str(failure))
        return failure.metrics
    except RunFailed as failure:
        _end(failure.exit_code, str(failure), multirun, cfg)
    except CONFIG_ERRORS as err:
        _end(exit_codes.REFUSED, f"{err} (nothing was computed)", multirun, cfg)
    except Exception:  # noqa: BLE001 - a bug: keep its traceback, and still one meaning for 4
        log.exception("the run failed before its folder was created")
        _end(exit_codes.FAILED, "the run failed before any result (traceback above)", multirun, cfg)
    return None


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one comparison; in a multirun, records its row for the sweep table."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if cfg.dry_run:
        try:
            planned = plan_dry_run(cfg)
        except (PreflightRefusal, *CONFIG_ERRORS) as err:
            _end(exit_codes.REFUSED, str(err), multirun, cfg)
            return None
        except Exception:  # noqa: BLE001 - a bug: keep its traceback
            log.exception("the dry run failed")
            _end(exit_codes.FAILED, "the dry run failed (traceback above)", multirun, cfg)
            return None
        print(planned.report, flush=True)
        if planned.error:
            print(f"error: {redacted(planned.error)}", file=sys.stderr, flush=True)
        if planned.code and not multirun:
            sys.exit(planned.code)
        if multirun:  # the sweep's callback prints every job's line as one table
            append_summary(hydra_cfg.sweep.dir, {**planned.row, SWEEP_JOB_TAG: hydra_cfg.job.num})
        _job_codes.append(planned.code)
        return None
    if multirun:
        # The sweep table is read back from MLflow by these tags, whichever process ran the job.
        tag_sweep_job(cfg, hydra_cfg.sweep.dir, hydra_cfg.job.num)
    metrics = _run_job(cfg, multirun)
    if metrics is None:
        return None
    # With MLflow the table is read from the runs; a multi-host run's row is process 0's.
    if multirun and cfg.logger.kind == "none" and multihost.is_primary():
        row = {**headline_row(metrics), SWEEP_JOB_TAG: hydra_cfg.job.num, "status": "FINISHED"}
        append_summary(hydra_cfg.sweep.dir, {**row, "gate_passed": metrics.get("gate_passed")})
    return metrics.get(Metric.SPEEDUP)


def _worst(codes: list[int]) -> int:
    """A sweep's code: a failure over a refusal over an over-time dry run over a missed gate."""
    for code in (exit_codes.FAILED, exit_codes.REFUSED, exit_codes.OVER_TIME):
        if code in codes:
            return code
    return exit_codes.OK


def _hydra_folder_problem(args: list[str]) -> str | None:
    """The refusal of a ``hydra.run.dir`` or ``hydra.sweep.dir`` override naming a folder that
    cannot be created or written (Hydra would end with its own traceback), or None."""
    for arg in args:
        key, _, value = arg.partition("=")
        value = value.strip("'\"")
        if key.lstrip("+") not in HYDRA_FOLDERS or not value or "${" in value:
            continue  # an interpolation (``${now:...}``) is Hydra's to resolve
        try:
            check_writable(Path(value), key.lstrip("+"))
        except PreflightRefusal as refusal:
            return str(refusal)
    return None


def cli(argv: list[str] | None = None) -> None:
    """Entry point: checks the overrides' names, runs, and turns every ending into its code."""
    args = prompt_aliases(sys.argv[1:] if argv is None else argv)
    problem = check_overrides(args) or _hydra_folder_problem(args)
    if problem:
        print(f"error: {redacted(problem)}", file=sys.stderr)
        sys.exit(exit_codes.REFUSED)
    # Hydra's parser takes the overrides as one run of words: ``dry_run=true -m experiment=...``
    # would refuse the words after ``-m``. The flag means the same anywhere, so it goes first.
    sys.argv = [sys.argv[0], *multirun_first(args)]
    # The job's own endings all exit through _end with their codes, never 1.
    exit_codes.run_hydra_entry(main, "a run folder, if one was made, says killed")
    code = _worst(_job_codes)
    if code:
        sys.exit(code)
    if _failed_gates or failed_jobs():
        sys.exit(exit_codes.GATE_FAILED)


if __name__ == "__main__":
    cli()
