"""The report's Markdown as one self-contained HTML page: figures embedded as data URIs, tables
as plain HTML tables (readable without scripts), nothing fetched from anywhere.

Only the Markdown the report writes is understood: ``#``/``##``/``###`` headings, pipe tables,
image lines ``![caption](figures/name.png)``, ``- `` lists, paragraphs, ``*emphasis*`` lines,
inline ``code``, backslash escapes (``\\*`` shows ``*``: how values from MLflow are written, see
``evalharness.formatting.markdown_text``) and the ``<details>``/``<summary>`` lines that fold a
table's further columns (passed through as HTML, as GitHub's Markdown does).

An image is embedded only from the report's own ``figures/`` folder: any other path (absolute,
``..``, a link, a file elsewhere) is refused and shown as text, never read, so no value that
reaches the page can pull a file off the machine that builds it.

Tables wrap rather than clip: headers and long text cells wrap, a number stays whole (a
threshold beside it may go to the next line), so the report fits a 1,400 px page and MLflow's
narrower artifact pane; a table still too wide scrolls sideways in its own box.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

_IMAGE = re.compile(r"^!\[(?P<alt>(?:\\.|[^\]\\])*)\]\((?P<src>[^)]+)\)$")
# A backslash-escaped punctuation character, or an inline code span.
_TOKEN = re.compile(r"\\(?P<char>[!-/:-@\[-`{-~])|`(?P<code>[^`]+)`")
_PIPE = re.compile(r"(?<!\\)\|")  # a cell border: a pipe not escaped
FIGURES = "figures"  # the only folder, under the page's own, images are embedded from
_RAW = re.compile(r"^</?(details|summary)\b")
# A cell that starts with a number (its unit sign, then perhaps "(min 25.00 ✓)" or an interval)
# is right-aligned; a column of other cells is text, left-aligned.
_NUMBER = re.compile(r"^([-+]?(inf|[\d,.]+)[%x]?|-)( |$)")
_SHORT = 12  # characters a text cell may have and stay on one line ("not gated")
_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg"}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1400px; color: #222;
       background: #fff; padding: 0 16px; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em;
       border-bottom: 1px solid #ddd; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; vertical-align: top; }
th { background: #eef2f6; position: sticky; top: 0; white-space: normal; min-width: 3em; }
td.word { white-space: nowrap; } .word, .text { text-align: left; }
td.text { overflow-wrap: break-word; }
td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
details { margin: 4px 0 12px; font-size: 13px; } summary { cursor: pointer; color: #345; }
figure { margin: 12px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 12px; color: #555; }
em { color: #7a4b00; } code { background: #f3f3f3; padding: 0 3px; }
li { margin: 3px 0; }
"""


def data_uri(path: Path) -> str:
    """``data:<mime>;base64,...`` of an image file."""
    mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _inline(text: str) -> str:
    """One line's text as HTML: escapes shown as their character, code spans as ``<code>``, a
    line wrapped in ``*`` as emphasis, everything else HTML-escaped."""
    emphasis = len(text) > 1 and text.startswith("*") and text.endswith("*")
    emphasis = emphasis and not text.endswith("\\*")
    if emphasis:
        text = text[1:-1]
    out, end = [], 0
    for match in _TOKEN.finditer(text):
        out.append(html.escape(text[end : match.start()]))
        code = match["code"]
        out.append(f"<code>{html.escape(code)}</code>" if code else html.escape(match["char"]))
        end = match.end()
    out.append(html.escape(text[end:]))
    joined = "".join(out)
    return f"<em>{joined}</em>" if emphasis else joined


def _cells(line: str) -> list[str]:
    """A table row's cells, split at the pipes that are not escaped."""
    row = line.strip().removeprefix("|")
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [c.strip() for c in _PIPE.split(row)]


def _kind(cells: list[str]) -> str:
    """The class of a column's cells: "" for numbers (right-aligned), "word" for short text
    (left, one line), "text" for longer text (left, wraps)."""
    if all(_NUMBER.match(c) for c in cells):
        return ""
    return "word" if max(len(c) for c in cells) <= _SHORT else "text"


def _table(lines: list[str]) -> str:
    head = _cells(lines[0])
    body = [_cells(line) for line in lines[2:]]
    kinds = [_kind([row[i] for row in body if i < len(row)] or ["-"]) for i in range(len(head))]
    attrs = [f' class="{k}"' if k else "" for k in kinds]
    out = ['<div class="scroll"><table>', "<thead><tr>"]
    out += [f"<th{a}>{_inline(c)}</th>" for a, c in zip(attrs, head, strict=True)]
    out.append("</tr></thead><tbody>")
    for row in body:
        cells = (f"<td{a}>{_inline(c)}</td>" for a, c in zip(attrs, row, strict=False))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _block(lines: list[str], base: Path) -> str:
    first = lines[0]
    if first.startswith("|"):
        return _table(lines)
    if _RAW.match(first):
        return "\n".join(_raw(line) for line in lines)
    if all(line.startswith("- ") for line in lines):
        return "<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>"
    if first.startswith("#"):
        level = len(first) - len(first.lstrip("#"))
        return f"<h{level}>{_inline(first[level:].strip())}</h{level}>"
    match = _IMAGE.match(first)
    if match:
        return _image(match["src"], match["alt"], base)
    return "<p>" + "<br>".join(_inline(line) for line in lines) + "</p>"


def figure_file(src: str, base: Path) -> Path | None:
    """The file an image line names when it is an image in ``base``'s figures folder (a
    relative path, inside that folder once links and ``..`` are resolved, an image type), else
    None."""
    if "://" in src or src.startswith(("/", "\\")) or ":" in src.split("/")[0]:
        return None
    folder = (base / FIGURES).resolve()
    path = (base / src).resolve()
    if not path.is_relative_to(folder) or path.suffix.lower() not in _MIME:
        return None
    return path if path.is_file() else None


def _image(src: str, alt: str, base: Path) -> str:
    """A figure embedded as a data URI, or, for a path outside the figures folder, a line saying
    it was refused (the file is never read)."""
    path = figure_file(src, base)
    if path is None:
        return (
            f'<p class="refused">image not embedded: {html.escape(src)} is not an image in the '
            f"report's {FIGURES}/ folder</p>"
        )
    caption = _inline(alt)
    return (
        f'<figure><img src="{data_uri(path)}" alt="{html.escape(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _raw(line: str) -> str:
    """A ``<details>``/``<summary>`` line as HTML, the summary's text escaped."""
    match = re.match(r"^<details><summary>(.*)</summary>$", line)
    if match:
        return f"<details><summary>{_inline(match[1])}</summary>"
    return line if line in ("<details>", "</details>") else html.escape(line)


def _blocks(markdown: str) -> list[list[str]]:
    """Lines grouped: a table's rows together, every heading or image alone, paragraphs."""
    blocks: list[list[str]] = []
    for line in markdown.splitlines():
        line = line.rstrip()
        if not line:
            blocks.append([])
            continue
        alone = line.startswith("#") or _IMAGE.match(line) or _RAW.match(line)
        table = line.startswith("|")
        if alone or not blocks or not blocks[-1] or blocks[-1][0].startswith("|") != table:
            blocks.append([line])
            if alone:
                blocks.append([])
        else:
            blocks[-1].append(line)
    return [b for b in blocks if b]


def render_html(markdown: str, base: Path, title: str) -> str:
    """The page: ``markdown`` converted, images under ``base`` embedded as data URIs."""
    body = "\n".join(_block(block, base) for block in _blocks(markdown))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
