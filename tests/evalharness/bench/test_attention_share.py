"""The attention-share benchmark: the run's configuration, refusals and its replacement attention
(the measured run itself is logged and read back in test_reports)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from evalharness.assembly import platform_choices
from evalharness.bench import attention_share
from evalharness.bench.run_config import AttentionCall
from evalharness.config import compose_run_config, to_config
from evalharness.estimates import SEED_ATTENTION_SHARE
from tests.helpers.harness_config import resolved_run_config


def _setup(*overrides: str) -> AttentionCall:
    return AttentionCall(resolved_run_config(overrides))


def test_what_is_not_given_is_the_runs_configuration():
    setup = _setup()
    run = platform_choices.resolve(to_config(compose_run_config()))
    assert setup.cfg == run
    assert setup.label == run.resolution.name and setup.video.frames == run.resolution.frames
    assert setup.model.num_layers > 0 and setup.batch == 2  # the run's joint guidance pair
    assert setup.dtype == jnp.dtype(run.dtype.value)


def test_given_overrides_stand_and_a_size_off_the_preset_is_labelled_by_pixels():
    setup = _setup(
        "model=tiny-random", "resolution.frames=9", "resolution.height=64", "warm_runs=4"
    )
    assert setup.cfg.model.name == "tiny-random" and setup.cfg.warm_runs == 4
    assert setup.label == f"9x64x{setup.cfg.resolution.width}px"
    assert _setup("resolution=720p").video.tokens == 75_600
    assert _setup("guidance_passes=separate").batch == 1
    with pytest.raises(SystemExit):
        attention_share.main(["resolution=4k"])


def test_a_size_that_does_not_fit_is_refused_naming_the_fix():
    setup = _setup("model=wan2.1-t2v-14b", "resolution=1440p", "kernel.dense_executor=reference")
    with pytest.raises(SystemExit) as refusal:
        attention_share.preflight(setup)
    message = str(refusal.value)
    assert "wan2.1-t2v-14b at 1440p (302,400 tokens" in message
    assert "GiB" in message and "resolution= or model=" in message


def test_too_long_is_refused_naming_max_minutes():
    setup = _setup("max_minutes=0.0001")
    with pytest.raises(SystemExit, match="max_minutes"):
        attention_share.preflight(setup)


def test_fewer_than_three_runs_is_refused():
    with pytest.raises(SystemExit):
        attention_share.main(["warm_runs=2"])


def test_without_attention_keeps_shape_and_every_input():
    q, k, v = (jnp.full((1, 6, 2, 4), x) for x in (1.0, 2.0, 3.0))
    out = attention_share.without_attention(q, k, v, step=0, layer=0)
    assert out.shape == q.shape and float(out[0, 0, 0, 0]) == 6.0


def test_seed_shares_are_the_seed_table():
    assert SEED_ATTENTION_SHARE == {"720p": 0.555, "1080p": 0.725, "1440p": 0.882}
