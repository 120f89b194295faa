"""Table cells and Markdown tables: one rule for reports, sweep summaries and the benchmarks."""

import json

from evalharness.bench.__main__ import main as bench_main
from evalharness.bench.report import TILE_COLUMNS, TIMING_COLUMNS, record_table
from evalharness.bench.report import table as bench_table
from evalharness.formatting import format_cell, markdown_table


def test_format_cell_rules():
    assert format_cell(None, "{:.2f}") == "-"
    assert format_cell(1.23456, "{:.2f}") == "1.23"
    assert format_cell("1.5", "{:.2f}x") == "1.50x"  # numeric strings (MLflow params) as numbers
    assert format_cell(float("inf"), "{:.2f}") == "inf"
    assert format_cell(1.7976931348623157e308, "{:.2f}") == "inf"  # MLflow's stored inf
    assert format_cell("hit", "{:.2f}") == "hit"
    assert format_cell("40") == "40"


def test_markdown_table():
    table = markdown_table([{"a": 1.0, "b": None}], [("A", "a", "{:.1f}"), ("B", "b", "{}")])
    assert table.splitlines() == ["| A | B |", "|---|---|", "| 1.0 | - |"]


def test_benchmark_tables_show_fractions_in_percent():
    row = {"block_q": 64, "median_ms": 12.34567, "tiles_visited_fraction": 0.41358, "runs": 5}
    table = bench_table([row], [("BQ", "block_q", "{}"), *TIMING_COLUMNS[:1], *TILE_COLUMNS[:1]])
    assert table.splitlines()[-1] == "| 64 | 12.35 | 41.36 |"
    assert row["tiles_visited_fraction"] == 0.41358  # the caller's rows (and JSON) stay fractions


def test_benchmark_record_table_keeps_ints_and_says_yes_no():
    table = record_table({"tokens": 75600, "density": 0.388712, "ok": True, "slow": False})
    assert table.splitlines() == [
        "| tokens | density | ok | slow |",
        "|---|---|---|---|",
        "| 75600 | 0.3887 | yes | no |",
    ]


def test_benchmark_tiles_command_reads_the_presets(capsys):
    argv = ["tiles", "resolution=720p", "schedule.density=0.3887", "kernel.block_q=3328"]
    assert bench_main([*argv, "kernel.block_kv=1536", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["frames"], stats["height"], stats["width"], stats["tokens"]) == (
        21,
        45,
        80,
        75_600,
    )
    assert (stats["num_q_tiles"], stats["num_kv_tiles"]) == (23, 50)
    # Executed pairs: whole visited tiles, padding included, so at least the kept fraction.
    assert stats["b3_executed_pairs_fraction"] >= stats["b3_density"]
    assert stats["executed_pairs_fraction"] >= stats["density"]
