"""Quality/speed gate: thresholds on PSNR and speedup turned into a process exit code.

``python -m evalharness.gate --experiment evalharness --min-psnr-db 20 --min-speedup 1.1`` checks the
latest finished run of an experiment (or ``--run-id``) in MLflow without rerunning anything.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

PSNR_METRIC = "psnr_ffmpeg_db"
SPEEDUP_METRIC = "speedup"


@dataclass(frozen=True)
class GateResult:
    """Outcome of a gate check: ``passed`` and one line per failed threshold."""

    passed: bool
    failures: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        """0 when every threshold was met, else 1."""
        return 0 if self.passed else 1


def check_gate(
    metrics: Mapping[str, float],
    *,
    min_psnr_db: float | None,
    min_speedup: float | None,
) -> GateResult:
    """Compares run metrics with the thresholds; a None threshold is not checked.

    Args:
        metrics: at least ``psnr_ffmpeg_db`` and ``speedup`` when their thresholds are set.
        min_psnr_db: lowest acceptable FFmpeg PSNR of sparse vs dense, in dB.
        min_speedup: lowest acceptable dense median / sparse median.

    Returns:
        The result; each failure names the metric, its value and the threshold.
    """
    failures = []
    for name, threshold in ((PSNR_METRIC, min_psnr_db), (SPEEDUP_METRIC, min_speedup)):
        if threshold is None:
            continue
        if name not in metrics:
            failures.append(f"{name} is missing from the run's metrics (threshold {threshold})")
            continue
        value = float(metrics[name])
        if math.isnan(value) or value < threshold:
            failures.append(f"{name} = {value:.4g} is below the threshold {threshold:.4g}")
    return GateResult(not failures, tuple(failures))


def main(argv: list[str] | None = None) -> int:
    """Command-line gate over existing MLflow runs; returns the exit code."""
    from mlflow.tracking import MlflowClient

    from evalharness.tracking import default_tracking_uri, finished_runs

    parser = argparse.ArgumentParser(prog="python -m evalharness.gate", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", help="MLflow run id to check")
    which.add_argument("--experiment", help="check the latest finished run of this experiment")
    parser.add_argument("--tracking-uri", help="default: sqlite database under --output-root")
    parser.add_argument("--output-root", default="outputs")
    parser.add_argument("--min-psnr-db", type=float)
    parser.add_argument("--min-speedup", type=float)
    args = parser.parse_args(argv)
    if args.min_psnr_db is None and args.min_speedup is None:
        parser.error("give at least one of --min-psnr-db and --min-speedup")
    client = MlflowClient(tracking_uri=args.tracking_uri or default_tracking_uri(args.output_root))
    if args.run_id:
        run = client.get_run(args.run_id)
    else:
        try:
            runs = finished_runs(client, args.experiment, 1)
        except LookupError as err:
            raise SystemExit(f"gate: {err}") from None
        if not runs:
            raise SystemExit(f"gate: experiment {args.experiment!r} has no finished run")
        run = runs[0]
    result = check_gate(
        run.data.metrics, min_psnr_db=args.min_psnr_db, min_speedup=args.min_speedup
    )
    label = f"run {run.info.run_id} ({run.info.run_name})"
    if result.passed:
        print(f"gate passed for {label}")
    for failure in result.failures:
        print(f"gate failed for {label}: {failure}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
