"""``python -m reports``: the seed's tables and figures regenerated from MLflow, as one page.

Reads the finished runs of an experiment (or the listed runs): harness comparisons, and the
benchmarks' runs (``--mlflow`` of ``python -m evalharness.bench``, ``.bench.attention_share``,
``.bench.schedules``, ``.bench.placement``). Writes into ``--out``:

- ``report.md``: the verdict per schedule (a sentence each and a table against the thresholds in
  force), the papers' PSNR / SSIM / LPIPS / speedup rows beside ours (also printed), quality vs
  speed, Table 1 (attention share per resolution), Table 2 (kernel
  progression), Table 3 (end to end per resolution and schedule), the other figures, and the
  benchmark tables;
- ``figures/*.png``: quality vs speed with the Pareto frontier, latency vs masked work across
  tile sizes, the masks in both layouts, tile classes, routing heat maps, per-frame PSNR;
- ``report.html``: the same as one self-contained page (figures embedded).

Then logs the folder as a run of the same experiment (tag ``report=true``; ``--no-log`` skips it),
so ``report.html`` opens in the MLflow UI's artifact viewer.

Usage:
    python -m reports [--experiment evalharness] [--tracking-uri URI] [--out outputs/reports]
    python -m reports --run-id ID [ID ...]          # just these runs
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from reports.build import build_report
from reports.papers_table import papers_section
from reports.publish import publish
from reports.sources import ReportError, load_runs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", default="evalharness", help="MLflow experiment to read")
    parser.add_argument("--run-id", nargs="+", default=[], help="these runs instead")
    parser.add_argument("--tracking-uri", help="default: sqlite database under --output-root")
    parser.add_argument("--output-root", default="outputs")
    parser.add_argument("--out", help="output folder (default <output-root>/reports/report-<time>)")
    parser.add_argument("--plan-run", help="harness run id whose plan the mask figures draw")
    parser.add_argument("--max-runs", type=int, default=500)
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    return parser


def _argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags that no store needs to answer, or None: ``--max-runs``
    below 1, an ``--out`` that is a file or lies where this user cannot create a folder."""
    if args.max_runs < 1:
        return f"--max-runs {args.max_runs} reads no run: give a count >= 1 (default 500)"
    if args.out is None:
        return None
    out = Path(args.out).absolute()
    there = out
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        return f"--out {args.out}: {there} is a file, not a folder; give a folder (it is created)"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"--out {args.out}: {there} is not writable by this user; give a folder it can write"
    return None


def _experiment_of(client, run_id: str) -> str:
    return client.get_experiment(client.get_run(run_id).info.experiment_id).name


def main(argv: list[str] | None = None) -> int:
    """Builds (and logs) the report; returns 0, or 2 with a message on bad input."""
    from evalharness.tracking import TrackingUnavailable, existing_store, open_client, redacted

    args = _parser().parse_args(argv)
    problem = _argument_problem(args)
    if problem:
        print(f"error: reports: {problem}", file=sys.stderr)
        return 2
    try:  # a missing store is not created; a wrong server is refused in seconds, not minutes
        uri = existing_store(args.tracking_uri, args.output_root, args.experiment)
    except TrackingUnavailable as refusal:
        print(f"error: reports: {refusal}", file=sys.stderr)
        return 2
    client = open_client(uri)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or Path(args.output_root) / "reports" / f"report-{stamp}")
    try:
        runs = load_runs(
            client, experiment=args.experiment, run_ids=args.run_id, max_runs=args.max_runs
        )
        source = (
            f"{len(args.run_id)} listed runs" if args.run_id else f"experiment {args.experiment!r}"
        )
        report = build_report(
            client, runs, out, source=f"{source} at {redacted(uri)}", plan_run=args.plan_run
        )
    except ReportError as err:
        print(f"error: reports: {err}", file=sys.stderr)
        return 2
    for note in report.missing:
        print(f"reports: {note}", file=sys.stderr)
    print("\n".join(papers_section(runs)))
    print(f"wrote {report.markdown}, {report.html} and {len(report.figures)} figures")
    if not args.no_log:
        experiment = _experiment_of(client, args.run_id[0]) if args.run_id else args.experiment
        run_id = publish(report, uri, experiment)
        print(
            f"logged the report as MLflow run {run_id} (experiment {experiment!r}, tag report=true)"
        )
    return 0
