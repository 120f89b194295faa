"""The kernel benchmark's parts as MLflow records (one run per part that ran: ``bench=``
kernel_table, tile_sweep, temporal_heads, kernel_memory), with its config and machine as params
and the notes and checks in the Markdown."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalharness.bench.mlflow_record import BenchRecord
from evalharness.bench.report import part_table, record_table

# bench tag -> (result key(s), row key, title)
_PARTS = (
    ("kernel_table", ("kernel_table",), "variant", "Kernel table"),
    ("tile_sweep", ("bq_sweep", "tile_sweep"), "tile", "Tile sweep"),
    ("temporal_heads", ("temporal",), "path", "Temporal heads"),
    ("kernel_memory", ("memory",), "variant", "Compiled peak memory"),
)


def _rows(key: str, rows: list[dict]) -> list[dict]:
    """Sweep rows get a ``tile`` name (``256x768``) so their metrics are ``<BQ>x<BKV>.<col>``."""
    if key in ("bq_sweep", "tile_sweep"):
        return [{"tile": f"{r['block_q']}x{r['block_kv']}", **r} for r in rows]
    return rows


def _markdown(title: str, key: str, rows: list[dict], result: Mapping[str, Any]) -> str:
    config = result["config"]
    body = part_table(key, rows, gpu=config["backend"] == "pallas_gpu")
    parts = [f"## {title} ({config['backend']})", "", body, ""]
    parts += [f"note: {note}" for note in _notes(key, result.get("notes", []))]
    if key == "kernel_table" and result.get("checks"):
        parts += ["", "### Checks", "", record_table(result["checks"])]
    return "\n".join(parts)


# Notes of the benchmark that belong to a part besides the kernel table (which gets them all).
_NOTE_PREFIXES = {"bq_sweep": "tile sweep", "tile_sweep": "tile sweep", "memory": "memory part"}


def _notes(key: str, notes: list[str]) -> list[str]:
    """The notes of part ``key``: all for the kernel table, else its own and interpret mode's."""
    if key == "kernel_table":
        return notes
    prefix = _NOTE_PREFIXES.get(key)
    return [n for n in notes if n.startswith("interpret mode") or (prefix and n.startswith(prefix))]


def kernel_records(
    result: Mapping[str, Any], resolution: str | None, plots: Mapping[str, str | None] | None = None
) -> list[BenchRecord]:
    """One record per part of ``result`` that ran (what ``--json`` prints), in part order.

    Args:
        result: the benchmark's result: "config" (with "machine"), the parts, "notes", "checks".
        resolution: the resolution's label (``AttentionCall.label``), or None for no tag.
        plots: result key -> figure path (the sweep's PNG), uploaded with that part.
    """
    config = result["config"]
    tags = {"backend": str(config["backend"])}
    if resolution is not None:
        tags["resolution"] = resolution
    records = []
    for bench, keys, row_key, title in _PARTS:
        key = next((k for k in keys if k in result), None)
        if key is None:
            continue
        rows = _rows(key, result[key])
        plot = (plots or {}).get(key)
        markdown = _markdown(title, key, rows, result)
        files = (Path(plot),) if plot else ()
        records.append(
            BenchRecord(bench, {**config, "part": key}, rows, row_key, markdown, tags, files)
        )
    return records
