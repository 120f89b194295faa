"""``python -m evalharness.gate``: the gate over runs already in MLflow, without rerunning.

``python -m evalharness.gate --experiment evalharness --min-psnr-db 40 --min-speedup 1.1`` checks the
latest finished run of an experiment (or ``--run-id``); ``--min-worst-frame-psnr-db`` adds a
threshold on the worst frame, ``--on`` picks the statistic a prompt suite's thresholds read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evalharness import exit_codes
from evalharness.gate.verdict import (
    PSNR_METRIC,
    SPEEDUP_METRIC,
    WORST_FRAME_PSNR_METRIC,
    check_gate,
)


def _the_run(client, run_id: str | None, experiment: str | None, finished_runs) -> Any:
    """The run to judge.

    Raises:
        LookupError: no such run, experiment, or finished run in it.
    """
    from mlflow.exceptions import MlflowException

    if run_id:
        try:
            return client.get_run(run_id)
        except MlflowException as err:
            raise LookupError(
                f"run {run_id!r} cannot be read: {str(err).splitlines()[0]}"
            ) from None
    runs = finished_runs(client, experiment, 1)
    if not runs:
        raise LookupError(f"experiment {experiment!r} has no finished run")
    return runs[0]


def _missing_sqlite_store(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI when it does not exist, else None."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    path = Path(uri[len(prefix) :])
    return None if path.exists() else path


def main(argv: list[str] | None = None) -> int:
    """Command-line gate over existing MLflow runs; returns the exit code (0 passed, 1 a
    threshold missed, 2 nothing to judge: ``evalharness.exit_codes``)."""
    from evalharness.tracking import default_tracking_uri, finished_runs, open_client

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
    default_store = Path(args.output_root).resolve() / "mlflow.db"
    if args.tracking_uri:
        missing = _missing_sqlite_store(args.tracking_uri)
    else:
        missing = None if default_store.exists() else default_store
    if missing is not None:
        # Opening it would create an empty store (and its folder) and then find no run.
        print(
            f"error: gate: no tracking store at {missing}: give the run's --output-root or "
            "--tracking-uri (the run prints both)",
            file=sys.stderr,
        )
        return exit_codes.REFUSED
    uri = args.tracking_uri or default_tracking_uri(args.output_root)
    try:
        run = _the_run(open_client(uri), args.run_id, args.experiment, finished_runs)
    except LookupError as err:
        # Nothing to judge is not a failed gate: exit 2, so CI tells a typo from a regression.
        print(f"error: gate: {err} (tracking store {uri})", file=sys.stderr)
        return exit_codes.REFUSED
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
