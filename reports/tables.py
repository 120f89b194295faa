"""The seed's three tables, rebuilt from logged runs.

- Table 1, attention share per resolution (``bench=attention_share`` runs), beside the analytic
  FLOP share and the seed's measured 55.5% / 72.5% / 88.2%;
- Table 2, kernel progression dense -> B1 -> B2 -> B3 (``bench=kernel_table`` runs);
- Table 3, end to end per resolution and schedule (harness runs).

Every row names the machine, backend and versions that produced it; when a table's rows come
from more than one machine, the machine cell of every row is marked with ``MIXED_MARK``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalharness.bench import metric_name
from evalharness.config import load_resolution
from evalharness.estimates import SEED_ATTENTION_SHARE, SEED_SETUP, step_flops
from evalharness.formatting import format_cell, markdown_table, markdown_text
from models.config import get_transformer_config
from reports.sources import Artifacts, ReportRun, of_kind

MIXED_MARK = "†"
PROVENANCE_COLUMNS = (
    ("machine", "_machine", "{}"),
    ("backend", "_backend", "{}"),
    ("versions", "_versions", "{}"),
    ("run", "_run", "{}"),
)
PERCENT = "{:.1%}"


@dataclass
class Table:
    """A titled table with its caption and notes, rendered to Markdown.

    Attributes:
        title: heading, e.g. "Table 1: ...".
        caption: what the rows are and where they come from.
        columns: ``(title, key, fmt)`` as ``evalharness.formatting.markdown_table`` takes them:
            the columns shown up front.
        rows: one dict per row.
        notes: lines under the table (mixed machines, missing runs, how to fill it).
        details: further columns, shown in a second table behind a ``<details>`` (so the table
            up front fits a narrow page), each row named again by the first ``key_columns``.
        key_columns: how many leading ``columns`` name a row in the details table.
    """

    title: str
    caption: str
    columns: Sequence[tuple[str, str, str]]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    details: Sequence[tuple[str, str, str]] = ()
    key_columns: int = 1

    def body(self) -> str:
        """The Markdown table of the columns up front (every cell shown literally)."""
        return markdown_table(self.rows, self.columns, escape=True)

    def markdown(self) -> str:
        """``## title``, the caption, the table and its details; a table without rows is one
        line (its title and the notes that say how to fill it), not a table of dashes."""
        if not self.rows:
            notes = "; ".join(note.rstrip(".") for note in self.notes) or "no data"
            return f"*{self.title}: {notes}.*\n"
        parts = [f"## {self.title}", "", self.caption, "", self.body(), ""]
        if self.details:
            keys = list(self.columns[: self.key_columns])
            names = ", ".join(title for title, _, _ in self.details)
            parts += [
                f"<details><summary>More columns: {names}</summary>",
                "",
                markdown_table(self.rows, [*keys, *self.details], escape=True),
                "",
                "</details>",
                "",
            ]
        parts += [f"*{note}*" for note in self.notes]
        return "\n".join(parts).rstrip() + "\n"


def provenance(run: ReportRun) -> dict[str, str]:
    """The provenance cells of a row from ``run``."""
    return {
        "_machine": run.machine,
        "_backend": run.tags.get("backend", run.params.get("backend", "?")),
        "_versions": run.versions,
        "_run": run.name,
    }


def mark_mixed_machines(table: Table) -> None:
    """Marks every machine cell and adds a note when rows come from several machines."""
    measured = [row for row in table.rows if row.get("_machine") and not row.get("_seed")]
    machines = {row["_machine"] for row in measured}
    if len(machines) > 1:
        for row in measured:
            row["_machine"] = f"{row['_machine']} {MIXED_MARK}"
        table.notes.append(
            f"{MIXED_MARK} rows from {len(machines)} machines: compare times across rows with "
            "care (each row's ratios are from one machine)"
        )


def _newest_per(runs: Sequence[ReportRun], key: Callable[[ReportRun], tuple]) -> list[ReportRun]:
    seen: dict[tuple, ReportRun] = {}
    for run in sorted(runs, key=lambda r: -r.start_time):
        seen.setdefault(key(run), run)
    return list(seen.values())


def decimals_for(values: Sequence[Any], significant: int = 3, most: int = 3) -> int:
    """Decimals that give the smallest nonzero of ``values`` ``significant`` digits (0 to
    ``most``), so that one column shows all its numbers one way (no ``1.92e+04`` beside
    ``0.512``)."""
    finite = [abs(float(v)) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    finite = [v for v in finite if v > 0]
    if not finite:
        return min(2, most)
    return max(0, min(most, significant - 1 - math.floor(math.log10(min(finite)))))


def fixed(rows: Sequence[dict[str, Any]], *keys: str) -> str:
    """A ``{:,.Nf}`` pattern for the columns ``keys`` of ``rows`` (see :func:`decimals_for`)."""
    return f"{{:,.{decimals_for([row.get(k) for row in rows for k in keys])}f}}"


def table1_columns(rows: Sequence[dict[str, Any]]) -> tuple[tuple, tuple]:
    """Table 1's columns up front and behind ``<details>`` (times in one fixed format)."""
    ms = fixed(rows, "with_ms", "attention_ms")
    front = (
        ("resolution", "resolution", "{}"),
        ("tokens", "tokens", "{:,.0f}"),
        ("model", "model", "{}"),
        ("measured share", "share", PERCENT),
        ("analytic FLOP share", "analytic", PERCENT),
        ("seed share", "seed", PERCENT),
    )
    details = (
        ("attention", "executor", "{}"),
        ("forward ms", "with_ms", ms),
        ("attention ms", "attention_ms", ms),
        ("share per round", "share_range", "{}"),
        *PROVENANCE_COLUMNS,
    )
    return front, details


def _seed_rows(measured: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """A row per seed resolution not measured here: Wan 14B's analytic share, the seed's."""
    rows = []
    config = get_transformer_config("wan2.1-t2v-14b")
    for res, seed in SEED_ATTENTION_SHARE.items():
        if (res, "wan2.1-t2v-14b") in measured:
            continue
        tokens = load_resolution(res).video.tokens
        attention, total = step_flops(config, tokens, 1)
        row = {"resolution": res, "tokens": tokens, "model": "wan2.1-t2v-14b"}
        row.update(executor="seed: splash (bf16)", analytic=attention / total, seed=seed)
        row.update(_machine="TPU v6e (seed, not measured here)", _seed=True)
        rows.append(row)
    return rows


def _table1_row(run: ReportRun) -> dict[str, Any]:
    res = run.tags.get("resolution", "?")
    m = {k.removeprefix(f"{metric_name(res)}."): v for k, v in run.metrics.items()}
    low, high = m.get("attention_share_round_min"), m.get("attention_share_round_max")
    return {
        "resolution": res,
        "tokens": m.get("tokens"),
        "model": run.tags.get("model"),
        "executor": f"{run.params.get('executor')} ({run.params.get('dtype')})",
        "with_ms": m.get("with_attention_median_ms"),
        "attention_ms": m.get("attention_ms"),
        "share": m.get("attention_share"),
        "share_range": f"{format_cell(low, PERCENT)}-{format_cell(high, PERCENT)}",
        "analytic": m.get("analytic_flop_share"),
        "seed": SEED_ATTENTION_SHARE.get(res),
        **provenance(run),
    }


def table1(runs: Sequence[ReportRun]) -> Table:
    """Attention share per resolution; the seed's resolutions not measured here get a row with
    the analytic share of Wan 14B and the seed's figure. Without an attention-share run the
    table is one line (the seed's figures alone would be a table of dashes)."""
    measured = _newest_per(
        of_kind(runs, "bench:attention_share"),
        lambda r: (r.tags.get("model"), r.tags.get("resolution"), r.params.get("executor")),
    )
    rows = [_table1_row(run) for run in measured]
    if rows:
        rows += _seed_rows({(r["resolution"], r["model"]) for r in rows})
    front, details = table1_columns(rows)
    table = Table(
        "Table 1: self-attention share of a transformer forward",
        "Measured: one forward with the dense attention against the same forward with "
        "attention replaced by q + k + v (medians of interleaved warm runs, random weights). "
        f"Analytic: self-attention FLOPs / all FLOPs. Seed: {SEED_SETUP}, one block.",
        front,
        rows,
        details=details,
    )
    if not measured:
        seed = ", ".join(f"{v:.1%} at {k}" for k, v in SEED_ATTENTION_SHARE.items())
        table.notes.append(
            f"no attention_share runs (the seed measured {seed}): run `python -m "
            "evalharness.bench.attention_share model=tiny-random --mlflow` (add "
            "logger.tracking_uri=/logger.experiment_name= to match)"
        )
    mark_mixed_machines(table)
    return table


def table2_columns(rows: Sequence[dict[str, Any]]) -> tuple[tuple, tuple]:
    """Table 2's columns up front and behind ``<details>`` (times in one fixed format)."""
    front = (
        ("variant", "variant", "{}"),
        ("median ms", "median_ms", fixed(rows, "median_ms")),
        ("speedup × vs fastest dense", "speedup_vs_fastest_dense", "{:.2f}"),
        ("of ideal", "fraction_of_ideal", "{:.2f}"),
        ("kept pairs", "density", PERCENT),
        ("tiles visited", "tiles_visited_fraction", PERCENT),
        ("flag", "ideal_flag", "{}"),
    )
    details = (
        ("min-max ms", "range_ms", "{}"),
        ("visited masked", "masked_fraction", PERCENT),
        ("pairs executed", "executed_pairs_fraction", PERCENT),
        *PROVENANCE_COLUMNS,
    )
    return front, details


_KERNEL_ORDER = {"b0": 0, "b1": 2, "b2": 3, "b3": 4}
TABLE2_TITLE = "Table 2: kernel progression (dense -> B1 -> B2 -> B3)"


def _table2(run: ReportRun, artifacts: Artifacts) -> Table:
    data = artifacts.json(run, "kernel_table.json") or {"rows": []}
    rows = sorted(data["rows"], key=lambda r: _KERNEL_ORDER.get(r["variant"], 1))
    ms = fixed(rows, "median_ms", "min_ms", "max_ms")
    for row in rows:
        row["range_ms"] = f"{ms.format(row['min_ms'])}-{ms.format(row['max_ms'])}"
        row.update(provenance(run))
    p = {k: markdown_text(v) for k, v in run.params.items()}
    caption = (
        f"{p.get('tokens')} tokens ({p.get('frames')} x {p.get('height')} x {p.get('width')}), "
        f"{p.get('heads')} heads x {p.get('head_dim')}, {p.get('dtype')}, tiles "
        f"{p.get('block_q')} x {p.get('block_kv')}, target density {p.get('target_density')}, "
        f"median of {p.get('runs')} interleaved warm runs. 'of ideal' = speedup over the "
        "fastest dense row x kept fraction."
    )
    front, details = table2_columns(rows)
    table = Table(TABLE2_TITLE, caption, front, rows, details=details)
    mark_mixed_machines(table)
    return table


def table2(runs: Sequence[ReportRun], artifacts: Artifacts, limit: int = 3) -> list[Table]:
    """Kernel progression, one table per kernel_table run (the newest ``limit`` geometries)."""
    kernel_runs = _newest_per(
        of_kind(runs, "bench:kernel_table"),
        lambda r: tuple(r.params.get(k) for k in ("backend", "tokens", "block_q", "block_kv")),
    )[:limit]
    tables = [_table2(run, artifacts) for run in kernel_runs]
    if not tables:
        how = (
            "no kernel_table runs: run `python -m evalharness.bench --mlflow` (e.g. "
            "`python -m evalharness.bench resolution=cpu --skip memory --mlflow`)"
        )
        tables.append(Table(TABLE2_TITLE, "", table2_columns([])[0], [], [how]))
    return tables
