"""The verdict section from runs as MLflow stores them (params as strings), without a server:
"not gated" vs "passed" vs "misses X by Y dB", and the page it renders into."""

from __future__ import annotations

import math

import pytest

from reports.html_page import render_html
from reports.sources import ReportRun
from reports.table3 import table3
from reports.tables import Table, decimals_for
from reports.verdict import (
    NOT_GATED,
    NOTHING_GATED,
    WORTH_IT,
    gate_outcome,
    thresholds,
    verdict,
    verdict_row,
    verdict_section,
)

METRICS = {
    "speedup": 1.92,
    "speedup_vs_b0": 2.4,
    "psnr_db": 31.2,
    "psnr_worst_frame_db": 24.25,
    "ssim_frames": 0.9512,
    "noise_floor_psnr_db": 48.0,
    "gap_to_noise_floor_db": 16.8,
    "dense_median_s": 19200.0,
    "sparse_median_s": 0.512,
    "schedule_kept_fraction": 0.65,
    "gate_passed": 1.0,
}
UNSET = {"gate.min_psnr_db": "None", "gate.min_worst_frame_psnr_db": "None"}
UNSET |= {"gate.min_speedup": "None", "gate.on": "mean"}


def _run(params: dict | None = None, tags: dict | None = None, **metrics: float) -> ReportRun:
    """An aggressive harness run at cpu; ``params`` over the unset thresholds."""
    return ReportRun(
        "0123456789abcdef",
        "tiny-cpu-aggressive",
        {**UNSET, "schedule.density": "0.5", **(params or {})},
        {**METRICS, **metrics},
        {"schedule": "aggressive", "resolution": "cpu", "model": "tiny-planted", **(tags or {})},
    )


def test_an_older_run_tagged_passed_without_thresholds_is_not_gated():
    run = _run(tags={"gate": "passed"})
    assert thresholds(run) == {}
    assert gate_outcome(run) == NOT_GATED
    assert verdict(run) == NOTHING_GATED == "no thresholds set: nothing gated"
    row = verdict_row(run)
    assert row["gate"] == "not gated" and "passed" not in str(row.values())
    assert "(min" not in row["psnr"]  # no threshold to show beside the value


@pytest.mark.parametrize("unset", ["None", "null", "", "nan"])
def test_any_spelling_of_an_unset_threshold_is_unset(unset):
    params = dict.fromkeys(UNSET, unset) | {"gate.on": "mean"}
    assert gate_outcome(_run(params, {"gate": "passed"})) == NOT_GATED


def test_the_new_not_gated_tag_is_read_as_it_is():
    assert gate_outcome(_run(tags={"gate": "not gated"})) == NOT_GATED


def test_a_run_that_meets_its_thresholds_is_worth_it():
    params = {"gate.min_psnr_db": "30.0", "gate.min_speedup": "1.1"}
    run = _run(params, {"gate": "passed"})
    assert gate_outcome(run) == "passed"
    assert verdict(run) == WORTH_IT == "worth it at these thresholds"
    row = verdict_row(run)
    assert (
        row["speedup"] == "1.92 (min\u00a01.10\u00a0✓)"
        and row["psnr"] == "31.20 (min\u00a030.00\u00a0✓)"
    )


def test_a_missed_worst_frame_threshold_says_by_how_much():
    run = _run({"gate.min_worst_frame_psnr_db": "25"}, {"gate": "failed"})
    assert gate_outcome(run) == "failed"
    assert verdict(run) == "misses worst-frame PSNR by 0.75 dB"
    assert verdict_row(run)["worst"] == "24.25 (min\u00a025.00\u00a0✗)"


def test_several_missed_thresholds_are_listed():
    params = {"gate.min_psnr_db": "32", "gate.min_worst_frame_psnr_db": "25"}
    params |= {"gate.min_speedup": "2.0"}
    run = _run(params, {"gate": "failed"})
    assert verdict(run) == (
        "misses speedup by 0.08x, PSNR by 0.80 dB and worst-frame PSNR by 0.75 dB"
    )


def test_a_suite_is_judged_on_the_statistic_in_force():
    params = {"gate.min_psnr_db": "30", "gate.on": "lcb"}
    run = _run(params, {"gate": "failed"}, pairs=4, psnr_db_lcb=29.5, psnr_db_ucb=33.0)
    assert verdict(run) == "misses PSNR by 0.50 dB"
    suite = _run(pairs=4, speedup_lcb=1.8, speedup_ucb=2.05)
    assert verdict_row(suite)["speedup"] == "1.92 [1.80, 2.05]"


def test_reused_dense_timings_cannot_pass_a_speedup_threshold():
    run = _run({"gate.min_speedup": "1.1"}, {"gate": "failed"}, dense_timing_reused=1.0)
    assert verdict(run).startswith("misses speedup (dense timings reused")


def test_without_gate_params_the_tag_decides():
    bare = ReportRun("r", "r", {}, dict(METRICS), {"schedule": "balanced", "gate": "failed"})
    assert gate_outcome(bare) == "failed"
    assert verdict(bare).startswith("gate failed")


def test_the_section_has_one_sentence_per_schedule_and_the_verdict_table():
    runs = [_run(), _run({"gate.min_worst_frame_psnr_db": "25"}, {"gate": "failed"})]
    text = "\n".join(verdict_section(runs))
    sentences = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(sentences) == 2
    assert "1.92x the speed of the fastest dense control" in sentences[0]
    assert "16.80 dB below the dense-vs-dense noise floor" in sentences[0]
    assert sentences[1].endswith("misses worst-frame PSNR by 0.75 dB.")
    header = next(line for line in text.splitlines() if line.startswith("| schedule"))
    for column in ("speedup", "PSNR dB", "worst-frame PSNR dB", "gap to noise floor dB"):
        assert column in header
    assert "| SSIM |" in header and "| gate |" in header


def test_no_harness_runs_is_one_line():
    lines = [line for line in verdict_section([]) if line]
    assert lines[0] == "## Verdict" and len(lines) == 2 and "No harness runs" in lines[1]


def test_table3_says_not_gated_and_keeps_detail_behind_details():
    table = table3([_run(tags={"gate": "passed"})])
    assert table.rows[0]["gate"] == "not gated"
    text = table.markdown()
    assert "<details><summary>More columns:" in text and "</details>" in text
    front = text.split("<details>")[0]
    assert "| worst-frame PSNR dB |" in front and "| machine |" not in front
    # One fixed format per column: no 1.92e+04 beside plain numbers.
    assert "19,200.000" in front and "0.512" in front and "e+0" not in text


def test_an_empty_table_is_one_line():
    empty = Table("Table 9: nothing", "caption", [("a", "a", "{}")], [], ["no x runs: run y"])
    assert empty.markdown() == "*Table 9: nothing: no x runs: run y.*\n"


def test_decimals_give_the_smallest_value_three_digits():
    assert decimals_for([19200.0, 0.512]) == 3
    assert decimals_for([19200.0, 12.5]) == 1
    assert decimals_for([math.inf, None, 3.0]) == 2


def test_page_wraps_and_folds(tmp_path):
    runs = [_run({"gate.min_worst_frame_psnr_db": "25"}, {"gate": "failed"})]
    markdown = "\n".join(verdict_section(runs)) + "\n" + table3(runs).markdown()
    page = render_html(markdown, tmp_path, "t")
    assert "<ul><li><code>aggressive</code> at cpu:" in page
    assert "<details><summary>More columns: model, tokens" in page and "</details>" in page
    assert '<td class="text">misses worst-frame PSNR by 0.75 dB</td>' in page
    assert "<td>1.920</td>" in page  # numbers stay on one line, text cells wrap
