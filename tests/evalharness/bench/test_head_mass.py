"""The head-mass bench: which band holds each head's attention, and whether the router agrees."""

from __future__ import annotations

import pytest

from evalharness.bench.head_mass import measure, steps_at
from models.planted_heads import planted_layout
from tests.helpers.harness_config import resolved_run_config


def test_the_named_steps_are_sparse_steps():
    assert steps_at(["first", "middle", "last"], 2, 10) == [2, 5, 9]
    assert steps_at(["last", "last"], 0, 4) == [3]
    with pytest.raises(ValueError, match="no sparse step"):
        steps_at(["first"], 10, 10)


def test_a_dense_schedule_is_refused(tmp_path):
    cfg = resolved_run_config(["schedule=dense", f"cache_dir={tmp_path}", "model=tiny-planted"])
    with pytest.raises(ValueError, match="schedule=dense is dense"):
        measure(cfg)


@pytest.mark.slow  # one dense generation and a forward of the planted model
def test_the_planted_heads_are_found_in_their_band_and_routed_there(tmp_path):
    cfg = resolved_run_config(["model=tiny-planted", f"cache_dir={tmp_path}"])
    report = measure(cfg, ["first"])
    layout = planted_layout(2, 4)
    for row in report.heads:
        assert row.kind == layout[row.layer][row.head], row
        own = row.spatial if row.kind == "spatial" else row.temporal
        assert own > 0.99 and min(row.spatial, row.temporal) < 0.6, row
    assert report.kinds() == {"spatial": 4, "temporal": 4}
    assert report.router_agreement() == 1.0
    assert 0.3 < report.spatial_band_share < 0.45 and 0.3 < report.temporal_band_share < 0.45
