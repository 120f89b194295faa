"""The run's work outside its loops: VAE decode FLOPs, text encoding, the whole-run table."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from evalharness.estimates.run_time import (
    HOST_NS_PER_PIXEL,
    RunWork,
    run_rows,
    text_encoder_flops,
    vae_decode_flops,
)
from evalharness.estimates.workload import TimeEstimate
from models.peak_memory import umt5_parameter_count
from models.text_encoder import UMT5Config
from models.tiny_components import TINY_VAE_CONFIG
from models.vae import TilingConfig, WanVAE, WanVAEConfig


def _lowered_chunk_flops(config, hw, first):
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    graph, state = nnx.split(vae)

    def chunk(state, x):
        model = nnx.merge(graph, state)
        return model.decoder(model.post_quant_conv(x), None, first)

    z = jax.ShapeDtypeStruct((1, 1, *hw, config.z_dim), jnp.float32)
    return jax.jit(chunk).lower(state, z).cost_analysis()["flops"]


def test_the_decode_line_predicts_xla_at_a_size_it_was_not_fitted_to():
    # XLA's CPU count includes elementwise work the traced count leaves out: within 2% here.
    hw = (12, 20)  # the line is fitted at 8 x 8 and 16 x 16
    direct = _lowered_chunk_flops(TINY_VAE_CONFIG, hw, True) + 2 * _lowered_chunk_flops(
        TINY_VAE_CONFIG, hw, False
    )
    assert vae_decode_flops(TINY_VAE_CONFIG, 3, hw, None) == pytest.approx(direct, rel=0.02)


def test_wan_decode_flops_at_720p_and_1440p():
    # The arithmetic: about 0.6 PFLOP per full 720p decode, 2.5 at 1440p (81 frames).
    config = WanVAEConfig()
    assert vae_decode_flops(config, 21, (90, 160), None) == pytest.approx(0.62e15, rel=0.05)
    assert vae_decode_flops(config, 21, (180, 320), None) == pytest.approx(2.5e15, rel=0.05)
    # Tiles overlap (256-pixel tiles every 192) and every window is full size (the cut edge
    # tiles' too): 4 x 7 windows of 32 x 32 latents compute 1.99x the latent's area.
    tiled = vae_decode_flops(config, 21, (90, 160), TilingConfig())
    ratio = tiled / vae_decode_flops(config, 21, (90, 160), None)
    assert ratio == pytest.approx(28 * 32 * 32 / (90 * 160), rel=0.05)


def test_text_encoder_flops_are_two_per_weight_and_token_plus_attention():
    config = UMT5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    _, layers = umt5_parameter_count(config)
    attention = 4 * 32 * 32 * 16 * 4 * 2
    assert text_encoder_flops(config, 32, 2) == 2 * (2 * layers * 32 + attention)


def _rows(pairs=1):
    work = RunWork(
        load_bytes=4e9, text_flops=1e12, decode_flops=2e12, video_pixels=1000, pairs=pairs
    )
    arms = {"dense": 4, "noise_floor": 4, "sparse": 5}
    return run_rows(
        work, arms, flops_per_s=1e12, float32_flops_per_s=1e12, vae_efficiency=0.5, vae_rate="x"
    )


def test_each_row_is_charged_to_the_arms_that_do_it():
    rows, sources = _rows(pairs=3)
    assert rows["weight loading"] == {"dense": 0, "noise_floor": 0, "sparse": 0, "shared": 4.0}
    assert rows["text encoding"]["shared"] == pytest.approx(3.0)  # 3 pairs x 1 s
    assert rows["VAE decode"]["dense"] == pytest.approx(12.0)  # 3 x 2 TFLOP at 0.5 TFLOP/s
    assert rows["host: measure"]["dense"] == 0.0  # the reference is not measured against itself
    expected = 3 * 1000 * HOST_NS_PER_PIXEL["measure"] * 1e-9
    assert rows["host: measure"]["sparse"] == pytest.approx(expected)
    assert "4.0 GB at 1.0 GB/s" in sources["weight loading"]


def test_the_whole_run_adds_loops_for_every_pair_and_the_rows_outside_them():
    rows, sources = _rows(pairs=2)
    runs = {"dense": 4, "sparse": 5}
    rows = {
        name: {c: v for c, v in row.items() if c != "noise_floor"} for name, row in rows.items()
    }
    estimate = TimeEstimate(
        assumption="a",
        seconds={"all": {"dense": 1.0, "sparse": 0.5}},
        sources={},
        bound={"dense": "compute", "sparse": "compute"},
        runs=runs,
        steps=10,
        pairs=2,
    )
    loops_only = estimate.total_minutes
    assert loops_only == pytest.approx((2 * 10 * 4 * 1.0 + 2 * 10 * 5 * 0.5) / 60)
    whole = dataclasses.replace(estimate, once=rows, once_sources=sources)
    outside = sum(v for row in rows.values() for v in row.values())
    assert whole.total_minutes == pytest.approx(loops_only + outside / 60)
    metrics = whole.as_metrics()
    assert metrics["time.once.vae_decode.sparse"] == pytest.approx(8.0)
    assert metrics["time.total_minutes"] == pytest.approx(whole.total_minutes)
    markdown = whole.to_markdown()
    assert "| whole run (s) | dense | sparse | shared |" in markdown
    assert "2 (prompt, seed) pairs" in markdown
