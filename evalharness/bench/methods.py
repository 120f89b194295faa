"""``python -m evalharness.bench.methods SWEEP_DIR``: one table comparing sparse methods.

Reads a sweep's runs (``SWEEP_DIR/summary.jsonl``, e.g. from
``python -m evalharness -m schedule=svg_720p,sta,radial schedule.density=0.41
schedule.sta_window=null schedule.radial_decay_factor=null``) and each run's ``metrics.json``, and
prints one Markdown row per run: the method and the parameters its mask ran with, the mask's kept
fraction and the run-wide one, the sparse arm's median seconds against the fastest dense control,
PSNR, SSIM, LPIPS where the run measured it, and whether the run is on the Pareto front of
speedup against PSNR across the table (no other run at least as fast and at least as close,
better in one).

Usage:
    python -m evalharness.bench.methods /path/to/output_root/multirun [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalharness.exit_codes import REFUSED
from evalharness.formatting import markdown_table

COLUMNS = (
    ("schedule", "schedule", "{}"),
    ("method", "schedule_method", "{}"),
    ("parameters", "parameters", "{}"),
    ("mask kept", "mask_density", "{:.3f}"),
    ("run kept", "schedule_kept_fraction", "{:.3f}"),
    ("sparse s", "sparse_median_s", "{:.2f}"),
    ("dense control s", "dense_median_s", "{:.2f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("PSNR dB", "psnr_db", "{:.2f}"),
    ("SSIM", "ssim_frames", "{:.4f}"),
    ("LPIPS", "lpips", "{:.4f}"),
    ("Pareto", "pareto", "{}"),
)


def _parameters(metrics: dict[str, Any]) -> str:
    """The method's own knobs as the run logged them."""
    if metrics.get("schedule_method") == "sta":
        return f"window {metrics.get('sta_window')} tiles of {metrics.get('sta_tile')}"
    if metrics.get("schedule_method") == "radial":
        return f"decay_factor {float(metrics['radial_decay_factor']):.3g}"
    if "svg_sparsity" in metrics:
        return f"svg_sparsity {metrics['svg_sparsity']}"
    return "-"


def pareto_flags(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Whether each (speedup, psnr) point is on the front: no other point is at least as good on
    both and better on one (higher is better on both)."""
    return [
        not any(a >= x and b >= y and (a > x or b > y) for j, (a, b) in enumerate(points) if j != i)
        for i, (x, y) in enumerate(points)
    ]


def method_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per finished run of the sweep, in the order it ran, with its Pareto flag.

    Args:
        sweep_dir: a multirun folder holding ``summary.jsonl``.

    Returns:
        Rows keyed as ``COLUMNS`` (``lpips`` None where the run did not measure it).
    """
    summary = sweep_dir / "summary.jsonl"
    if not summary.is_file():
        raise FileNotFoundError(f"{summary} not found: pass the sweep's multirun folder")
    rows = []
    for line in summary.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("status") != "FINISHED":
            continue
        metrics = json.loads((Path(entry["run_dir"]) / "metrics.json").read_text())
        row = {key: metrics.get(key) for _, key, _ in COLUMNS}
        row.update(parameters=_parameters(metrics), schedule=entry["schedule"])
        row["lpips"] = metrics.get("lpips", metrics.get("lpips_frames"))
        rows.append(row)
    points = [(float(r["speedup"]), float(r["psnr_db"])) for r in rows]
    for row, front in zip(rows, pareto_flags(points), strict=True):
        row["pareto"] = "yes" if front else ""
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the table (or JSON rows); exit 2 on a folder without a sweep summary."""
    parser = argparse.ArgumentParser(prog="python -m evalharness.bench.methods")
    parser.add_argument("sweep_dir", type=Path, help="the sweep's multirun folder")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    try:
        rows = method_rows(args.sweep_dir)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return REFUSED
    print(json.dumps(rows, indent=1) if args.json else markdown_table(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
