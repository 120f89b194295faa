"""Tables and figures across MLflow runs: the seed's Table 3 (latency and quality per schedule) and a
quality-vs-speed scatter, built from what the harness logged.

``python -m reports --experiment evalharness`` prints the table and writes ``runs.md`` and
``quality_vs_speed.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import matplotlib

from evalharness.formatting import format_cell, markdown_table
from evalharness.tracking import finished_runs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The runs table: (title, key, fmt) per column, as evalharness.formatting.markdown_table takes them.
COLUMNS = (
    ("run", "run", "{}"),
    ("model", "model.name", "{}"),
    ("resolution", "resolution.name", "{}"),
    ("schedule", "schedule.name", "{}"),
    ("steps", "steps", "{}"),
    ("dense s", "dense_median_s", "{:.3f}"),
    ("sparse s", "sparse_median_s", "{:.3f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("PSNR dB (raw frames)", "psnr_db", "{:.2f}"),
    ("noise floor dB", "noise_floor_psnr_db", "{:.2f}"),
    ("SSIM", "ssim_frames", "{:.4f}"),
    ("kept", "schedule_kept_fraction", "{:.3f}"),
    ("device", "device_kind", "{}"),
)


def run_rows(client, experiment_name: str, max_runs: int = 200) -> list[dict[str, Any]]:
    """Finished runs of an experiment, newest first, as flat dicts of params, metrics and tags."""
    try:
        runs = finished_runs(client, experiment_name, max_runs)
    except LookupError as err:
        raise SystemExit(f"reports: {err}") from None
    rows = []
    for r in runs:
        row: dict[str, Any] = {"run": r.info.run_name or r.info.run_id[:8]}
        row.update(r.data.params)
        row.update(r.data.metrics)
        row.update(r.data.tags)
        rows.append(row)
    return rows


def quality_vs_speed_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Scatter of PSNR against speedup, one point per run, labelled by schedule."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        speedup, psnr = row.get("speedup"), row.get("psnr_db")
        if speedup is None or psnr is None or format_cell(psnr) == "inf":
            continue
        ax.scatter(float(speedup), float(psnr))
        label = f"{row.get('schedule.name', '?')} {row.get('resolution.name', '')}"
        ax.annotate(label, (float(speedup), float(psnr)), fontsize=8)
    floors = [float(r["noise_floor_psnr_db"]) for r in rows if r.get("noise_floor_psnr_db")]
    floors = [f for f in floors if math.isfinite(f)]
    if floors:
        ax.axhline(min(floors), ls="--", c="grey", label="dense-vs-dense noise floor (min)")
        ax.legend()
    ax.set_xlabel("speedup (dense / sparse median denoising time)")
    ax.set_ylabel("PSNR sparse vs dense, FFmpeg (dB)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: print the runs table and write it with the scatter plot."""
    from mlflow.tracking import MlflowClient

    from evalharness.tracking import default_tracking_uri

    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__)
    parser.add_argument("--experiment", default="evalharness")
    parser.add_argument("--tracking-uri", help="default: sqlite database under --output-root")
    parser.add_argument("--output-root", default="outputs")
    parser.add_argument("--out", default="outputs/reports")
    args = parser.parse_args(argv)
    client = MlflowClient(args.tracking_uri or default_tracking_uri(args.output_root))
    rows = run_rows(client, args.experiment)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, COLUMNS)
    (out / "runs.md").write_text(table + "\n")
    quality_vs_speed_plot(rows, out / "quality_vs_speed.png")
    print(table)
    print(f"\nwrote {out / 'runs.md'} and {out / 'quality_vs_speed.png'}")
    return 0
