"""The benchmarks' Markdown: the kernel benchmark's columns ``(title, key, fmt)`` (four
significant digits; shares of tiles and pairs in percent) and a benchmark report's frame."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalharness.formatting import markdown_table
from evalharness.machine import machine_line

NUMBER = "{:.4g}"

# Keys holding a fraction in [0, 1] that the tables show as a percentage.
PERCENT_KEYS = (
    "tiles_visited_fraction",
    "executed_pairs_fraction",
    "masked_fraction",
    "wasted_fraction",
    "density",
)

TIMING_COLUMNS = (
    ("median ms", "median_ms", NUMBER),
    ("min", "min_ms", NUMBER),
    ("max", "max_ms", NUMBER),
    ("CPU ms", "cpu_median_ms", NUMBER),
)
TILE_COLUMNS = (
    ("visited %", "tiles_visited_fraction", NUMBER),
    ("executed pairs %", "executed_pairs_fraction", NUMBER),
    ("visited masked %", "masked_fraction", NUMBER),
    ("wasted %", "wasted_fraction", NUMBER),
    ("density %", "density", NUMBER),
)
SPEEDUP_COLUMNS = (
    ("speedup vs B0", "speedup_vs_b0", NUMBER),
    ("speedup vs control", "speedup_vs_dense", NUMBER),
    ("speedup vs fastest dense", "speedup_vs_fastest_dense", NUMBER),
    ("of ideal", "fraction_of_ideal", NUMBER),
    ("speedup vs splash, same mask", "speedup_vs_masked_peer", NUMBER),
)
FLAG_COLUMN = ("flag", "ideal_flag", "{}")
KERNEL_TABLE_COLUMNS = (
    ("variant", "variant", "{}"),
    *TIMING_COLUMNS,
    *TILE_COLUMNS,
    *SPEEDUP_COLUMNS,
    ("CPU speedup vs fastest dense", "cpu_speedup_vs_fastest_dense", NUMBER),
    ("CPU of ideal", "cpu_fraction_of_ideal", NUMBER),
    FLAG_COLUMN,
)
# On a GPU the host's CPU time measures waiting for the kernel, so its columns are left out; the
# launch parameters of the Triton kernel are shown instead.
GPU_KERNEL_TABLE_COLUMNS = (
    ("variant", "variant", "{}"),
    *TIMING_COLUMNS[:3],
    *(c for c in TILE_COLUMNS if c[1] != "wasted_fraction"),
    *SPEEDUP_COLUMNS,
    FLAG_COLUMN,
    ("warps", "num_warps", "{}"),
    ("stages", "num_stages", "{}"),
)
# Tile-sweep rows hold one tile's B0, B2 and B3 side by side; B3's plan statistics in percent.
TILE_SWEEP_PERCENT_KEYS = (
    "b3_tiles_visited_fraction",
    "b3_executed_pairs_fraction",
    "b3_masked_fraction",
)
TILE_SWEEP_COLUMNS = (
    ("BQ", "block_q", "{}"),
    ("BKV", "block_kv", "{}"),
    ("warps", "num_warps", "{}"),
    ("stages", "num_stages", "{}"),
    ("B0 ms", "b0_median_ms", NUMBER),
    ("B2 ms", "b2_median_ms", NUMBER),
    ("B2 min", "b2_min_ms", NUMBER),
    ("B2 max", "b2_max_ms", NUMBER),
    ("B3 ms", "b3_median_ms", NUMBER),
    ("B3 min", "b3_min_ms", NUMBER),
    ("B3 max", "b3_max_ms", NUMBER),
    ("B2 of ideal", "b2_fraction_of_ideal", NUMBER),
    ("B3 of ideal", "b3_fraction_of_ideal", NUMBER),
    ("B3 visited %", "b3_tiles_visited_fraction", NUMBER),
    ("B3 executed pairs %", "b3_executed_pairs_fraction", NUMBER),
    ("B3 visited masked %", "b3_masked_fraction", NUMBER),
    FLAG_COLUMN,
    ("refused", "refused", "{}"),
)
SWEEP_COLUMNS = (("BQ", "block_q", "{}"), *TIMING_COLUMNS, *TILE_COLUMNS)
TEMPORAL_COLUMNS = (
    ("path", "path", "{}"),
    *TIMING_COLUMNS,
    *TILE_COLUMNS,
    ("max abs diff", "max_abs_difference_between_paths", NUMBER),
)
MEMORY_COLUMNS = (
    ("variant", "variant", "{}"),
    ("tokens", "tokens", "{}"),
    ("GiB", "peak_gib", NUMBER),
)
PLACEMENT_COLUMNS = (
    ("variant", "variant", "{}"),
    *TIMING_COLUMNS,
    ("sent MB (computed)", "sent_mb", NUMBER),
    ("of which all-gather MB", "gather_mb", NUMBER),
    ("sent GB at 720p 14B", "full_720p_gb", NUMBER),
)


def table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[tuple[str, str, str]],
    percent_keys: Sequence[str] = PERCENT_KEYS,
) -> str:
    """``markdown_table`` of ``rows`` with the fractions under ``percent_keys`` in percent."""
    rows = [
        {k: (100 * v if k in percent_keys and v is not None else v) for k, v in row.items()}
        for row in rows
    ]
    return markdown_table(rows, columns)


def part_table(key: str, rows: Iterable[Mapping[str, Any]], gpu: bool) -> str:
    """One part of the kernel benchmark (its result ``key``) in its own columns; ``gpu``: the
    backend is ``pallas_gpu`` (its kernel table's own columns)."""
    columns = {
        "kernel_table": GPU_KERNEL_TABLE_COLUMNS if gpu else KERNEL_TABLE_COLUMNS,
        "bq_sweep": SWEEP_COLUMNS,
        "tile_sweep": TILE_SWEEP_COLUMNS,
        "temporal": TEMPORAL_COLUMNS,
        "memory": MEMORY_COLUMNS,
    }
    if key not in columns:
        raise ValueError(f"unknown benchmark part {key!r}; one of {sorted(columns)}")
    if key == "tile_sweep":
        return table(rows, columns[key], TILE_SWEEP_PERCENT_KEYS)
    return table(rows, columns[key])


def record_table(record: Mapping[str, Any]) -> str:
    """One dict as a one-row table, a column per key in order: numbers to four digits, bools as
    yes/no (for records whose keys vary, such as tile statistics and acceptance checks)."""
    row = {k: ("yes" if v else "no") if isinstance(v, bool) else v for k, v in record.items()}
    columns = [
        (key, key, NUMBER if isinstance(value, float) else "{}") for key, value in row.items()
    ]
    return markdown_table([row], columns)


def report_markdown(title: str, setup: dict, table: str, closing: str, machine: dict) -> str:
    """A benchmark's Markdown report: ``# title``, the setup line, the machine
    (``evalharness.machine.machine_info``'s), the table and the closing line (the verdict)."""
    setup_line = ", ".join(f"{k} {v}" for k, v in setup.items())
    return "\n\n".join([f"# {title}", setup_line, machine_line(machine), table, closing])
