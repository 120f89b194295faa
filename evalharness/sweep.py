"""Hydra callback that prints one table per multirun: speedup and PSNR per job.

Each job appends its headline metrics to ``<sweep dir>/summary.jsonl``; at the end of the multirun the
callback reads them back and prints the table (and writes ``summary.md`` beside it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from evalharness.formatting import markdown_table

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.jsonl"
_COLUMNS = (
    ("schedule", "schedule", "{}"),
    ("kept fraction", "schedule_kept_fraction", "{:.3f}"),
    ("dense median s", "dense_median_s", "{:.3f}"),
    ("sparse median s", "sparse_median_s", "{:.3f}"),
    ("speedup", "speedup", "{:.3f}x"),
    ("PSNR FFmpeg dB", "psnr_ffmpeg_db", "{:.2f}"),
    ("PSNR frames dB", "psnr_frames_db", "{:.2f}"),
    ("SSIM", "ssim_frames", "{:.4f}"),
    ("noise floor dB", "noise_floor_psnr_db", "{:.2f}"),
    ("dense arm", "dense_cache", "{}"),
)


def append_summary(sweep_dir: str | Path, row: dict[str, Any]) -> None:
    """Appends one job's headline metrics to the sweep's summary file."""
    path = Path(sweep_dir) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the jobs' headline metrics."""
    return markdown_table(rows, _COLUMNS)


class SweepSummary(Callback):
    """Prints the per-job table when a multirun ends."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(config.hydra.sweep.dir) / SUMMARY_FILE
        if path.exists():
            path.unlink()  # a new sweep into the same folder starts a new table

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(config.hydra.sweep.dir) / SUMMARY_FILE
        if not path.is_file():
            log.warning("no job of this multirun recorded a summary (%s)", path)
            return
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        table = summary_table(rows)
        (path.parent / "summary.md").write_text(table + "\n")
        print(f"\nMultirun summary ({len(rows)} jobs):\n{table}\n", flush=True)
