"""Numbers into table cells: one rule for reports, sweep summaries and the console; and text
from elsewhere (MLflow values, a prompt) into Markdown that shows it literally."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

# MLflow stores an infinite metric (identical videos have infinite PSNR) as the largest float.
_MLFLOW_INF = 1e300
# Markdown's inline and block markup (emphasis, code, links and images, raw HTML, tables,
# headings, strikethrough, entities); a backslash before any of them shows the character itself.
_MARKUP = re.compile(r"([\\`*\[\]<>|!#&~])")


def markdown_text(value: Any) -> str:
    """``value`` as Markdown that shows it literally, on one line: every line break (``\\n``,
    ``\\r``, Unicode's) becomes a space and every markup character is escaped with a backslash, so
    no value can start a heading, an image, a link, raw HTML or a table cell of its own.

    Args:
        value: any value; ``str(value)`` is what is shown.
    """
    return _MARKUP.sub(r"\\\1", " ".join(str(value).splitlines()))


def markdown_code(value: Any) -> str:
    """``value`` as an inline code span, on one line; its backticks, the one thing that could
    end the span early, shown as ``'`` (nothing else is markup inside a code span)."""
    return "`" + " ".join(str(value).splitlines()).replace("`", "'") + "`"


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
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str, str]],
    *,
    escape: bool = False,
) -> str:
    """Rows as a Markdown table.

    Args:
        rows: one mapping per table row.
        columns: ``(title, key, fmt)`` per column; ``fmt`` as in :func:`format_cell`.
        escape: show every cell literally (:func:`markdown_text`): for cells holding values
            read from elsewhere (MLflow tags and params, prompts), which may hold markup.
    """
    shown = markdown_text if escape else str
    lines = [
        "| " + " | ".join(title for title, _, _ in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        cells = [shown(format_cell(row.get(key), fmt)) for _, key, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
