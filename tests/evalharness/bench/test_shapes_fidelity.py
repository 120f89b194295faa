"""The shapes-fidelity bench: held-out pairs and what counts as right."""

from __future__ import annotations

import pytest

from evalharness.bench.shapes_fidelity import (
    MIN_COLOUR_SHARE,
    MIN_DIRECTION_SHARE,
    MIN_SMOOTH_SHARE,
    PairReading,
    held_out_pairs,
    summarize,
)
from models.shapes_data import BACKGROUNDS, held_out_specs, is_held_out


def test_held_out_pairs_cover_every_background_with_distinct_seeds():
    pairs = held_out_pairs(24)
    assert len({spec.prompt for spec, _ in pairs}) == 24
    assert {spec.background for spec, _ in pairs} == set(BACKGROUNDS)
    assert all(is_held_out(spec.objects[0], spec.background) for spec, _ in pairs)
    assert len({seed for _, seed in pairs}) == 24
    with pytest.raises(ValueError, match="pairs=0"):
        held_out_pairs(0)
    with pytest.raises(ValueError, match=f"expected 1 to {len(held_out_specs())}"):
        held_out_pairs(len(held_out_specs()) + 1)


def _reading(colour="red", direction="left", r2=0.95):
    return PairReading("p", 0, "red", "left", colour, direction, r2)


def test_the_summary_counts_colour_direction_and_smoothness_and_can_fail():
    good = [_reading() for _ in range(9)]
    assert summarize(good).meets()
    wrong_colour = summarize([*good, _reading(colour="cyan")])  # 90%: still meets
    assert wrong_colour.colour_share == 0.9 and wrong_colour.meets()
    assert not summarize([*good[:8], _reading(colour=None), _reading(colour="cyan")]).meets()
    lost = summarize([*good[:8], _reading(direction="static", r2=0.1), _reading(r2=0.5)])
    assert lost.direction_share == 0.9 and lost.smooth_share == 0.8 and not lost.meets()
    assert MIN_COLOUR_SHARE == 0.9 and MIN_DIRECTION_SHARE == MIN_SMOOTH_SHARE == 0.85
