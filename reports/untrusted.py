"""Markdown read from a run's artifacts (a benchmark's table, a search's front), made inert
before it joins the report: its tables, headings and emphasis kept, but nothing in it can embed
an image or pass raw HTML (the ``<details>`` folds the harness writes excepted). Single values
from MLflow are escaped whole instead (``evalharness.formatting.markdown_text``)."""

from __future__ import annotations

import re

# ``<`` (raw HTML, autolinks) or ``![`` (an image) not already escaped: preceded by an even
# number of backslashes, each pair an escaped backslash.
_ACTIVE = re.compile(r"(?<!\\)((?:\\\\)*)(<|!\[)")
# The folds the harness's own tables use, passed through as HTML by ``reports.html_page``.
_FOLD = re.compile(r"^(<details>|</details>|<details><summary>[^<>]*</summary>)$")


def untrusted_markdown(text: str) -> str:
    """``text`` with every image and raw-HTML opening escaped; everything else unchanged.

    Args:
        text: Markdown from an artifact.
    """
    lines = []
    for line in text.splitlines():
        lines.append(line if _FOLD.match(line.strip()) else _ACTIVE.sub(r"\1\\\2", line))
    return "\n".join(lines)
