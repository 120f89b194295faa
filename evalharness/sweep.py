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

from evalharness.artifacts import headline_columns
from evalharness.formatting import markdown_table

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.jsonl"


def append_summary(sweep_dir: str | Path, row: dict[str, Any]) -> None:
    """Appends one job's headline metrics to the sweep's summary file."""
    path = Path(sweep_dir) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def summary_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the jobs' headline metrics."""
    return markdown_table(rows, headline_columns())


class SweepSummary(Callback):
    """Prints the per-job table when a multirun ends."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Starts a new table: drops the summary file a previous sweep left in the same folder."""
        path = Path(config.hydra.sweep.dir) / SUMMARY_FILE
        if path.exists():
            path.unlink()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Prints the table of the jobs' rows and writes it to ``summary.md``."""
        path = Path(config.hydra.sweep.dir) / SUMMARY_FILE
        if not path.is_file():
            log.warning("no job of this multirun recorded a summary (%s)", path)
            return
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        table = summary_table(rows)
        (path.parent / "summary.md").write_text(table + "\n")
        print(f"\nMultirun summary ({len(rows)} jobs):\n{table}\n", flush=True)
