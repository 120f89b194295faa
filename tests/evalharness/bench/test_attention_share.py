"""The attention-share benchmark: sizes, refusals and its replacement attention (the measured run
itself is logged and read back in test_reports)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from evalharness.bench import attention_share
from evalharness.estimates import SEED_ATTENTION_SHARE


def test_custom_pixel_sizes_and_presets():
    assert attention_share.video_geometry("9x64x64px").tokens == 3 * 4 * 4
    assert attention_share.video_geometry("720p").tokens == 75_600
    with pytest.raises(SystemExit):
        attention_share._parser().parse_args(["--resolution", "9x63x64px"])
    with pytest.raises(SystemExit):
        attention_share._parser().parse_args(["--resolution", "4k"])


def test_a_size_that_does_not_fit_is_refused_naming_the_fix(capsys):
    args = attention_share._parser().parse_args(
        ["--model", "wan2.1-t2v-14b", "--resolution", "1440p", "--executor", "model"]
    )
    with pytest.raises(SystemExit) as refusal:
        attention_share.preflight(args, "1440p")
    message = str(refusal.value)
    assert "wan2.1-t2v-14b at 1440p (302,400 tokens" in message
    assert "GiB" in message and "--resolution or --model" in message


def test_too_long_is_refused_naming_max_minutes():
    args = attention_share._parser().parse_args(["--max-minutes", "0.0001"])
    with pytest.raises(SystemExit, match="--max-minutes"):
        attention_share.preflight(args, "cpu")


def test_without_attention_keeps_shape_and_every_input():
    q, k, v = (jnp.full((1, 6, 2, 4), x) for x in (1.0, 2.0, 3.0))
    out = attention_share.without_attention(q, k, v, step=0, layer=0)
    assert out.shape == q.shape and float(out[0, 0, 0, 0]) == 6.0


def test_seed_shares_are_the_seed_table():
    assert SEED_ATTENTION_SHARE == {"720p": 0.555, "1080p": 0.725, "1440p": 0.882}
