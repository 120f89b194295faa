"""Numbers into table cells: one rule for reports, sweep summaries and the console."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# MLflow stores an infinite metric (identical videos have infinite PSNR) as the largest float.
_MLFLOW_INF = 1e300


def format_cell(value: Any, fmt: str = "{}") -> str:
    """Formats one value: None as "-", infinite (or MLflow's stand-in for it) as "inf".

    Args:
        value: a number, a string (numeric strings are formatted as numbers), or None.
        fmt: a ``str.format`` pattern, e.g. ``"{:.3f}"``; ``"{}"`` leaves the value as it is.

    Returns:
        The text; a value the pattern cannot format is shown as ``str(value)``.
    """
    if value is None:
        return "-"
    if fmt != "{}":
        try:
            value = float(value)
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float) and (math.isinf(value) or value > _MLFLOW_INF):
        return "inf"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]
) -> str:
    """Rows as a Markdown table.

    Args:
        rows: one mapping per table row.
        columns: ``(title, key, fmt)`` per column; ``fmt`` as in :func:`format_cell`.
    """
    lines = [
        "| " + " | ".join(title for title, _, _ in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        cells = [format_cell(row.get(key), fmt) for _, key, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
