"""The default model, trained on moving shapes and shipped: it draws held-out prompts, and a broken
sparse arm falls well under the CI gate while the correctly routed default schedule passes it.

Both run the default job's config (``model=tiny``, ``resolution=cpu``, balanced, 10 UniPC steps,
guidance 5) on the shipped weights; nothing is timed.
"""

from __future__ import annotations

import pytest

from evalharness.bench.negative_controls import DEFAULT_MIN_PSNR_DB, measure_controls, sound
from evalharness.bench.shapes_fidelity import held_out_pairs, read_pairs, summarize
from tests.helpers.harness_config import resolved_run_config

# How far under the gate's threshold every broken arm must fall: a gate that a broken arm misses
# by a fraction of a decibel would pass it after any small change of the model or the schedule.
MARGIN_DB = 5.0


@pytest.mark.slow  # the dense arm of 24 held-out pairs (about 3.5 minutes on 2 cores)
def test_the_default_model_draws_the_colour_and_motion_of_held_out_prompts(tmp_path):
    cfg = resolved_run_config([f"output_root={tmp_path}/o", f"cache_dir={tmp_path}/c"])
    assert cfg.model.name == "tiny" and cfg.model.checkpoint is None  # the shipped weights
    summary = summarize(read_pairs(cfg, held_out_pairs(24)))
    assert summary.meets(), summary


@pytest.mark.slow  # a dense arm and five sparse arms (about 3 minutes on 2 cores)
def test_every_broken_arm_falls_far_under_the_gate_that_the_default_schedule_passes(tmp_path):
    cfg = resolved_run_config([f"output_root={tmp_path}/o", f"cache_dir={tmp_path}/c"])
    assert (cfg.model.name, cfg.schedule.name) == ("tiny", "balanced")
    rows = measure_controls(cfg)
    assert sound(rows), rows
    broken = [row for row in rows if row["control"] != "none"]
    assert all(row["psnr_db"] <= DEFAULT_MIN_PSNR_DB - MARGIN_DB for row in broken), rows
    # LPIPS agrees: every broken arm is perceptually further from dense than the correct one.
    (correct,) = [row for row in rows if row["control"] == "none"]
    assert all(row["lpips"] > correct["lpips"] > 0 for row in broken), rows
