"""The seed's three tables, rebuilt from logged runs.

- Table 1, attention share per resolution (``bench=attention_share`` runs), beside the analytic
  FLOP share and the seed's measured 55.5% / 72.5% / 88.2%;
- Table 2, kernel progression dense -> B1 -> B2 -> B3 (``bench=kernel_table`` runs);
- Table 3, end to end per resolution and schedule (harness runs).

Every row names the machine, backend and versions that produced it; when a table's rows come
from more than one machine, the machine cell of every row is marked with ``MIXED_MARK``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalharness.bench import metric_name
from evalharness.config import load_resolution
from evalharness.estimates import SEED_ATTENTION_SHARE, SEED_SETUP, step_flops
from evalharness.formatting import format_cell, markdown_table
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
        columns: ``(title, key, fmt)`` as ``evalharness.formatting.markdown_table`` takes them.
        rows: one dict per row.
        notes: lines under the table (mixed machines, missing runs, how to fill it).
    """

    title: str
    caption: str
    columns: Sequence[tuple[str, str, str]]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """``## title``, the caption, the table (or the notes alone when empty)."""
        parts = [f"## {self.title}", "", self.caption, ""]
        if self.rows:
            parts += [markdown_table(self.rows, self.columns), ""]
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


TABLE1_COLUMNS = (
    ("resolution", "resolution", "{}"),
    ("tokens", "tokens", "{:,.0f}"),
    ("model", "model", "{}"),
    ("attention", "executor", "{}"),
    ("forward ms", "with_ms", "{:.4g}"),
    ("attention ms", "attention_ms", "{:.4g}"),
    ("measured share", "share", PERCENT),
    ("per round", "share_range", "{}"),
    ("analytic FLOP share", "analytic", PERCENT),
    ("seed share", "seed", PERCENT),
    *PROVENANCE_COLUMNS,
)


def table1(runs: Sequence[ReportRun]) -> Table:
    """Attention share per resolution; the seed's resolutions not measured here get a row with
    the analytic share of Wan 14B and the seed's figure."""
    measured = _newest_per(
        of_kind(runs, "bench:attention_share"),
        lambda r: (r.tags.get("model"), r.tags.get("resolution"), r.params.get("executor")),
    )
    rows = []
    for run in measured:
        res = run.tags.get("resolution", "?")
        m = {k.removeprefix(f"{metric_name(res)}."): v for k, v in run.metrics.items()}
        low, high = m.get("attention_share_round_min"), m.get("attention_share_round_max")
        rows.append(
            {
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
        )
    table = Table(
        "Table 1: self-attention share of a transformer forward",
        "Measured: one forward with the dense attention against the same forward with "
        "attention replaced by q + k + v (medians of interleaved warm runs, random weights). "
        f"Analytic: self-attention FLOPs / all FLOPs. Seed: {SEED_SETUP}, one block.",
        TABLE1_COLUMNS,
        rows,
    )
    measured_res = {(r["resolution"], r["model"]) for r in rows}
    config = get_transformer_config("wan2.1-t2v-14b")
    for res, seed in SEED_ATTENTION_SHARE.items():
        if (res, "wan2.1-t2v-14b") in measured_res:
            continue
        tokens = load_resolution(res).video.tokens
        attention, total = step_flops(config, tokens, 1)
        row = {"resolution": res, "tokens": tokens, "model": "wan2.1-t2v-14b"}
        row.update(executor="seed: splash (bf16)", analytic=attention / total, seed=seed)
        row.update(_machine="TPU v6e (seed, not measured here)", _seed=True)
        table.rows.append(row)
    if not measured:
        table.notes.append(
            "no attention_share runs: run `python -m evalharness.bench.attention_share --model "
            "tiny --resolution cpu --mlflow` (add --tracking-uri/--experiment to match)"
        )
    mark_mixed_machines(table)
    return table


TABLE2_COLUMNS = (
    ("variant", "variant", "{}"),
    ("median ms", "median_ms", "{:.4g}"),
    ("min-max ms", "range_ms", "{}"),
    ("tiles visited", "tiles_visited_fraction", PERCENT),
    ("visited masked", "masked_fraction", PERCENT),
    ("pairs executed", "executed_pairs_fraction", PERCENT),
    ("kept pairs", "density", PERCENT),
    ("speedup vs fastest dense", "speedup_vs_fastest_dense", "{:.2f}x"),
    ("of ideal", "fraction_of_ideal", "{:.2f}"),
    ("flag", "ideal_flag", "{}"),
    *PROVENANCE_COLUMNS,
)
_KERNEL_ORDER = {"b0": 0, "b1": 2, "b2": 3, "b3": 4}


def table2(runs: Sequence[ReportRun], artifacts: Artifacts, limit: int = 3) -> list[Table]:
    """Kernel progression, one table per kernel_table run (the newest ``limit`` geometries)."""
    kernel_runs = _newest_per(
        of_kind(runs, "bench:kernel_table"),
        lambda r: tuple(r.params.get(k) for k in ("backend", "tokens", "block_q", "block_kv")),
    )[:limit]
    tables = []
    for run in kernel_runs:
        data = artifacts.json(run, "kernel_table.json") or {"rows": []}
        rows = sorted(data["rows"], key=lambda r: _KERNEL_ORDER.get(r["variant"], 1))
        for row in rows:
            row["range_ms"] = f"{row['min_ms']:.4g}-{row['max_ms']:.4g}"
            row.update(provenance(run))
        p = run.params
        caption = (
            f"{p.get('tokens')} tokens ({p.get('frames')} x {p.get('height')} x {p.get('width')}), "
            f"{p.get('heads')} heads x {p.get('head_dim')}, {p.get('dtype')}, tiles "
            f"{p.get('block_q')} x {p.get('block_kv')}, target density {p.get('target_density')}, "
            f"median of {p.get('runs')} interleaved warm runs. 'of ideal' = speedup over the "
            "fastest dense row x kept fraction."
        )
        table = Table(
            "Table 2: kernel progression (dense -> B1 -> B2 -> B3)", caption, TABLE2_COLUMNS, rows
        )
        mark_mixed_machines(table)
        tables.append(table)
    if not tables:
        tables.append(
            Table(
                "Table 2: kernel progression (dense -> B1 -> B2 -> B3)",
                "From `python -m evalharness.bench` runs.",
                TABLE2_COLUMNS,
                [],
                [
                    "no kernel_table runs: run `python -m evalharness.bench --mlflow` (e.g. "
                    "`--resolution cpu --skip memory`)"
                ],
            )
        )
    return tables
