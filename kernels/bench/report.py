"""Markdown tables for the benchmark's text output."""

from __future__ import annotations


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown_table(rows: list[dict], columns: list[tuple[str, str, float]]) -> str:
    """Renders rows as a Markdown table.

    Args:
        rows: dicts of values.
        columns: (key, header, scale) triples; numeric values are multiplied by scale
            (e.g. 100 for percentages).

    Returns:
        The table text.
    """
    lines = [
        "| " + " | ".join(header for _, header, _ in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        cells = []
        for key, _, scale in columns:
            value = row.get(key, "")
            if isinstance(value, int | float) and not isinstance(value, bool) and scale != 1:
                value = float(value) * scale
            cells.append(_cell(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


TIMING_COLUMNS = [
    ("median_ms", "median ms", 1),
    ("min_ms", "min", 1),
    ("max_ms", "max", 1),
    ("cpu_median_ms", "CPU ms", 1),
]
TILE_COLUMNS = [
    ("tiles_visited_fraction", "visited %", 100),
    ("masked_fraction", "visited masked %", 100),
    ("wasted_fraction", "wasted %", 100),
    ("density", "density %", 100),
]
