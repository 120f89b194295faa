"""``python -m evalharness.gate``: the gate over runs already in MLflow, without rerunning.

``python -m evalharness.gate --experiment evalharness --min-psnr-db 40 --min-speedup 1.1`` checks the
latest finished run of an experiment (or ``--run-id``); ``--min-worst-frame-psnr-db`` adds a
threshold on the worst frame, ``--on`` picks the statistic a prompt suite's thresholds read.
"""

from __future__ import annotations

import argparse
import sys

from evalharness.gate.verdict import (
    PSNR_METRIC,
    SPEEDUP_METRIC,
    WORST_FRAME_PSNR_METRIC,
    check_gate,
)


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
    parser.add_argument("--min-psnr-db", type=float, help=f"threshold on {PSNR_METRIC}")
    parser.add_argument(
        "--min-worst-frame-psnr-db", type=float, help=f"threshold on {WORST_FRAME_PSNR_METRIC}"
    )
    parser.add_argument("--min-speedup", type=float, help=f"threshold on {SPEEDUP_METRIC}")
    parser.add_argument(
        "--on",
        choices=("mean", "lcb", "worst"),
        default="mean",
        help="statistic across a prompt suite's pairs each threshold reads (default: mean)",
    )
    args = parser.parse_args(argv)
    thresholds = (args.min_psnr_db, args.min_worst_frame_psnr_db, args.min_speedup)
    if all(t is None for t in thresholds):
        parser.error(
            "give at least one of --min-psnr-db, --min-worst-frame-psnr-db and --min-speedup"
        )
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
        run.data.metrics,
        min_psnr_db=args.min_psnr_db,
        min_speedup=args.min_speedup,
        min_worst_frame_psnr_db=args.min_worst_frame_psnr_db,
        on=args.on,
    )
    label = f"run {run.info.run_id} ({run.info.run_name})"
    if result.passed:
        print(f"gate passed for {label}")
    for failure in result.failures:
        print(f"gate failed for {label}: {failure}", file=sys.stderr)
    return result.exit_code
