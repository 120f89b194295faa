"""``python -m evalharness``: a matched dense-vs-sparse comparison configured by Hydra.

With no arguments it runs the embedded default (the tiny model at the CPU preset, balanced
schedule). Exit codes: 0 done; 1 failed, or missed a gate threshold (the message names the
metric); 2 refused by preflight (the message gives the numbers and the override). With
``dry_run=true`` it only plans (``evalharness.admission.dry_run_report``): 0 fits, 2 does not.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from evalharness.admission import dry_run
from evalharness.comparison import SWEEP_JOB_TAG, append_summary, failed_jobs, tag_sweep_job
from evalharness.config import register_configs
from evalharness.evidence import headline_row
from evalharness.refusal import PreflightRefusal
from evalharness.run import GateFailed, run
from evalharness.tracking import multihost

log = logging.getLogger("evalharness")
register_configs()
_failed_gates: list[str] = []


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Runs one comparison; in a multirun, records its row for the sweep table."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun and not cfg.dry_run:
        # The sweep table is read back from MLflow by these tags, whichever process ran the job.
        tag_sweep_job(cfg, hydra_cfg.sweep.dir, hydra_cfg.job.num)
    if cfg.dry_run:
        code, report = dry_run(cfg)
        print(report, flush=True)
        if code:
            sys.exit(code)
        return None
    try:
        metrics = run(cfg)
    except PreflightRefusal as refusal:
        # Not a crash: a clear answer that the run does not fit. No traceback.
        print(f"error: {refusal}", file=sys.stderr)
        sys.exit(2)
    except GateFailed as failure:
        print(f"error: {failure}", file=sys.stderr)
        metrics = failure.metrics
        _failed_gates.append(str(failure))
    # With MLflow the table is read from the runs; a multi-host run's row is process 0's.
    if multirun and cfg.logger.kind == "none" and multihost.is_primary():
        row = {**headline_row(metrics), SWEEP_JOB_TAG: hydra_cfg.job.num, "status": "FINISHED"}
        append_summary(hydra_cfg.sweep.dir, {**row, "gate_passed": metrics.get("gate_passed")})
    return metrics.get("speedup")


def cli() -> None:
    """Entry point that turns gate failures (of any job in a sweep, in this process or in a
    launcher's) into exit code 1."""
    main()
    if _failed_gates or failed_jobs():
        sys.exit(1)


if __name__ == "__main__":
    cli()
