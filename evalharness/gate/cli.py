"""``python -m evalharness.gate``: the gate over runs already in MLflow, without rerunning.

``python -m evalharness.gate --experiment evalharness --min-psnr-db 40 --min-speedup 1.1`` checks the
latest finished harness run of an experiment (tag ``run_kind=harness``: reports, searches and
benchmarks logged there never count), or ``--run-id``, which must name a finished harness run;
``--min-worst-frame-psnr-db`` adds a threshold on the worst frame, ``--max-lpips`` one on LPIPS,
``--on`` picks the statistic a prompt suite's thresholds read and ``--psnr`` the PSNR convention
``--min-psnr-db`` reads (``video``: ``psnr_db``; ``frames``: ``psnr_frames_db``). Exit 0 passed, 1 a threshold missed, 2 nothing to judge (a bad
flag, an unusable store, no such run, a run that is not a finished harness run, or a quality
threshold on a run on random weights, tag ``weights=random``, whose speed alone is judged).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evalharness import exit_codes
from evalharness.config import GateOn, GatePSNR, limit_problem, random_weights_gate_problem
from evalharness.gate.verdict import check_gate
from evalharness.metric_names import RANDOM_WEIGHTS, WEIGHTS, Metric
from evalharness.tracking import (
    RUN_KIND_TAG,
    TrackingUnavailable,
    existing_store,
    open_client,
    redacted,
)

HARNESS_KIND = "harness"  # the ``run_kind`` tag of a ``python -m evalharness`` run
THRESHOLD_FLAGS = ("min_psnr_db", "min_worst_frame_psnr_db", "max_lpips", "min_speedup")


class NothingToJudge(LookupError):
    """No run the gate may judge: the message says which and why."""


def _judgeable(run: Any) -> Any:
    """``run`` when it is a finished harness run.

    Raises:
        NothingToJudge: it is deleted (alone or with its experiment), it did not finish, or it
            is not a harness run.
    """
    label = f"run {run.info.run_id} ({run.info.run_name})"
    if run.info.lifecycle_stage == "deleted":
        raise NothingToJudge(
            f"{label} is deleted, so there is nothing to judge: restore it (`mlflow runs restore "
            f"--run-id {run.info.run_id}`, or `mlflow experiments restore --experiment-id "
            f"{run.info.experiment_id}` if its experiment was deleted), or give the id of a run "
            "that is not deleted"
        )
    if run.info.status != "FINISHED":
        raise NothingToJudge(
            f"{label} is {run.info.status}, not FINISHED: its metrics may be partial, so the "
            "gate judges finished runs only; rerun it, or give the id of a finished run"
        )
    kind = run.data.tags.get(RUN_KIND_TAG)
    if kind != HARNESS_KIND:
        raise NothingToJudge(
            f"{label} is a {kind or 'untagged'} run (tag {RUN_KIND_TAG}={kind or 'unset'}), not "
            f"a harness run ({RUN_KIND_TAG}={HARNESS_KIND}): give the id of a "
            "`python -m evalharness` run"
        )
    return run


def _latest_harness_run(client, experiment: str) -> Any:
    """The newest finished top-level harness run of ``experiment``.

    Raises:
        NothingToJudge: no such experiment, or no finished harness run in it.
    """
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise NothingToJudge(f"no MLflow experiment named {experiment!r}")
    runs = client.search_runs(
        [found.experiment_id],
        filter_string=(
            f"attributes.status = 'FINISHED' and tags.{RUN_KIND_TAG} = '{HARNESS_KIND}'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=100,
    )
    top = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # not a suite's pairs
    if not top:
        raise NothingToJudge(
            f"experiment {experiment!r} has no finished harness run (tag "
            f"{RUN_KIND_TAG}={HARNESS_KIND}): run `python -m evalharness` first"
        )
    return top[0]


def _the_run(client, run_id: str | None, experiment: str | None) -> Any:
    """The run to judge: ``run_id`` if it is a finished harness run, else the experiment's latest.

    Raises:
        NothingToJudge: no such run or experiment, or nothing the gate may judge there.
    """
    from mlflow.exceptions import MlflowException

    try:
        if not run_id:
            return _latest_harness_run(client, experiment)
        run = client.get_run(run_id)
    except MlflowException as err:
        what = f"run {run_id!r}" if run_id else f"experiment {experiment!r}"
        raise NothingToJudge(f"{what} cannot be read: {str(err).splitlines()[0]}") from None
    return _judgeable(run)


def _random_weights_problem(run: Any, args: argparse.Namespace) -> str | None:
    """The refusal of a quality threshold on a run on random weights (tag ``weights=random``),
    whose quality figures mean nothing; None when the run is on real weights or only its speed
    is gated."""
    if run.data.tags.get(WEIGHTS) != RANDOM_WEIGHTS:
        return None
    quality = {"--min-psnr-db": args.min_psnr_db}
    quality["--min-worst-frame-psnr-db"] = args.min_worst_frame_psnr_db
    quality["--max-lpips"] = args.max_lpips
    return random_weights_gate_problem(quality, "--min-speedup")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evalharness.gate", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", help="MLflow run id of a finished harness run to check")
    which.add_argument(
        "--experiment", help="check the latest finished harness run of this experiment"
    )
    parser.add_argument("--tracking-uri", help="default: sqlite database under --output-root")
    parser.add_argument("--output-root", default="outputs")
    parser.add_argument("--min-psnr-db", type=float, help=f"threshold on {Metric.PSNR_DB}")
    parser.add_argument(
        "--min-worst-frame-psnr-db", type=float, help=f"threshold on {Metric.PSNR_WORST_FRAME_DB}"
    )
    parser.add_argument("--max-lpips", type=float, help=f"upper threshold on {Metric.LPIPS}")
    parser.add_argument("--min-speedup", type=float, help=f"threshold on {Metric.SPEEDUP}")
    parser.add_argument(
        "--psnr",
        choices=[convention.value for convention in GatePSNR],
        default="video",
        help="the PSNR --min-psnr-db reads: video (psnr_db) or frames (psnr_frames_db)",
    )
    parser.add_argument(
        "--on",
        choices=[on.value for on in GateOn],
        default="mean",
        help="statistic across a prompt suite's pairs each threshold reads (default: mean)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line gate over existing MLflow runs; returns the exit code (0 passed, 1 a
    threshold missed, 2 nothing to judge: ``evalharness.exit_codes``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if all(getattr(args, name) is None for name in THRESHOLD_FLAGS):
        parser.error(
            "give at least one of --min-psnr-db, --min-worst-frame-psnr-db, --max-lpips and "
            "--min-speedup"
        )
    # The first threshold flag that is not a finite number >= 0, named as typed.
    for name in THRESHOLD_FLAGS:
        problem = limit_problem("--" + name.replace("_", "-"), getattr(args, name))
        if problem:
            print(f"error: gate: {problem}", file=sys.stderr)
            return exit_codes.REFUSED
    uri = None
    try:
        # A missing store is refused, not opened (that would create an empty one, and its folder).
        experiment = args.experiment or "of the run"
        try:
            uri = existing_store(args.tracking_uri, args.output_root, experiment)
            client = open_client(uri)  # its lock may be held past the timeout by a writer
        except TrackingUnavailable as refusal:
            raise NothingToJudge(str(refusal)) from None
        run = _the_run(client, args.run_id, args.experiment)
    except NothingToJudge as err:
        # Nothing to judge is not a failed gate: exit 2, so CI tells a typo from a regression.
        where = f" (tracking store {redacted(uri)})" if uri else ""
        print(f"error: gate: {err}{where}", file=sys.stderr)
        return exit_codes.REFUSED
    problem = _random_weights_problem(run, args)
    if problem:
        print(
            f"error: gate: run {run.info.run_id} ({run.info.run_name}): {problem}", file=sys.stderr
        )
        return exit_codes.REFUSED
    thresholds = {name: getattr(args, name) for name in THRESHOLD_FLAGS}
    result = check_gate(run.data.metrics, **thresholds, on=args.on, psnr=args.psnr)
    label = f"run {run.info.run_id} ({run.info.run_name})"
    if result.passed:
        print(f"gate passed for {label}")
    if result.failures:  # one error line, naming each metric, its value and its threshold
        print(f"error: gate failed for {label}: {'; '.join(result.failures)}", file=sys.stderr)
    return result.exit_code
