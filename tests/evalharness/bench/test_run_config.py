"""The benchmarks on the run's configuration refuse a bad override as the run does: exit 2 with
the run's own message (the closest setting, the choices of a group), before any work."""

from __future__ import annotations

import pytest

from evalharness.bench import __main__ as kernel_bench
from evalharness.bench import (
    attention_share,
    head_mass,
    host_side,
    negative_controls,
    placement,
    routing_spectrum,
    schedules,
    shapes_fidelity,
)
from evalharness.config import compose_run_config, to_config
from tests.helpers.harness_config import resolved_run_config

BENCHMARKS = [
    kernel_bench,
    attention_share,
    head_mass,
    host_side,
    negative_controls,
    placement,
    routing_spectrum,
    schedules,
    shapes_fidelity,
]


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("warm_runz=3", "did you mean warm_runs?"),
        ("resolution=4k", "no resolution named '4k'; the choices are 1080p"),
        ("steps=many", "steps='many' is not a valid value"),
    ],
)
def test_a_bad_override_exits_2_with_the_runs_message(bench, override, says, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main([override])
    assert refused.value.code == 2
    assert says in capsys.readouterr().err


def test_the_resolved_config_is_the_runs_for_this_host():
    cfg = resolved_run_config(["resolution=720p"])
    assert cfg.resolution == to_config(compose_run_config(["resolution=720p"])).resolution
    assert cfg.kernel.block_q is not None and cfg.kernel.backend.value != "auto"
