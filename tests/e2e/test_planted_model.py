"""The planted default model: its heads really are spatial / temporal, routing finds them, and a
broken sparse arm fails the CI gate while the correct arm passes.

Everything runs at the default job's geometry (``resolution=cpu``: 9 latent frames x 12 x 20
tokens) with the schedules' own densities and the CPU's resolved tiles.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from evalharness.assembly.components import transformer_config_for
from evalharness.bench.negative_controls import measure_controls, sound
from evalharness.config.schemas import ModelConfig
from evalharness.evidence.cache_key import dense_arm_key
from evalharness.gate.verdict import check_gate
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import route_heads, routing_key
from models.attention import dense_attention
from models.config import WanTransformerConfig
from models.planted_heads import (
    MAX_PLANTED_FRAMES,
    causal_drop,
    causal_profile,
    head_vectors,
    peak_drop,
    plant_heads,
    planted_layout,
)
from models.rope import apply_rope, axis_frequencies, rope_tables
from models.tiny_components import tiny_identity, tiny_transformer
from models.transformer import WanTransformer
from tests.helpers.harness_config import resolved_run_config
from tests.helpers.schedules import load_schedule

GRID = (9, 12, 20)  # the default job's tokens: resolution=cpu, 33 x 192 x 320 pixels
GEOMETRY = TokenGeometry(*GRID)
TILES = BlockSizes(128, 128)  # what kernel=auto resolves to on a CPU at 2,160 tokens
S = GEOMETRY.tokens_per_frame
INDEX = np.arange(GEOMETRY.tokens)
FRAME, ROW, COLUMN = INDEX // S, INDEX % S // GRID[2], INDEX % GRID[2]
# Query rows: every frame, first/middle/last rows and columns.
QUERIES = np.asarray(
    [f * S + y * GRID[2] + x for f in range(GRID[0]) for y in (0, 5, 11) for x in (0, 9, 19)]
)


def test_the_constant_vectors_give_the_documented_margins():
    sharpness = 7.0
    cos, sin = rope_tables(GRID, 64)
    for kind in ("spatial", "temporal"):
        q, k = (
            jnp.asarray(np.broadcast_to(x, (1, GEOMETRY.tokens, 1, 64)))
            for x in head_vectors(kind, 64, sharpness)
        )
        qr, kr = apply_rope(q, cos, sin)[0, :, 0], apply_rope(k, cos, sin)[0, :, 0]
        scores = np.asarray(qr[QUERIES] @ kr.T) / 8.0  # [queries, keys], / sqrt(D)
        for row, query in zip(scores, QUERIES, strict=True):
            f, y, x = FRAME[query], ROW[query], COLUMN[query]
            if kind == "spatial":  # own frame, own column: flat over rows, others >= margin below
                wanted = (FRAME == f) & (COLUMN == x)
                np.testing.assert_allclose(row[wanted], row[wanted].max(), atol=1e-2)
            else:  # own position, earlier frames; later frames >= margin below the own frame
                wanted = (ROW == y) & (COLUMN == x) & (FRAME <= f)
                later = (ROW == y) & (COLUMN == x) & (FRAME > f)
                if later.any():
                    assert row[later].max() <= row[query] - sharpness + 1e-2
            assert row[~wanted].max() <= row[wanted].max() - sharpness + 1e-2
    # The margins are what the construction solves for, on the tiny model's frequencies.
    time, space = axis_frequencies(24), axis_frequencies(20)
    assert peak_drop(time) > 0.3 and peak_drop(space) > 0.3 and causal_drop(time) > 0.4
    # Frames two or more back score above the own frame: the head mostly looks back.
    earlier = causal_profile(time, np.arange(-(MAX_PLANTED_FRAMES - 1), -1))
    assert earlier.min() - causal_profile(time, np.zeros(())) > 0.9 * causal_drop(time)


@pytest.fixture(scope="module")
def planted():
    """The planted model's q, k, v of both blocks on a guided batch of noise at t = 900."""
    model = tiny_transformer("tiny-planted", 0)
    keys = jax.random.split(jax.random.key(5), 2)
    latents = jnp.broadcast_to(jax.random.normal(keys[0], (1, 16, 9, 24, 40)), (2, 16, 9, 24, 40))
    context = jax.random.normal(keys[1], (2, model.config.text_len, model.config.text_dim))

    @nnx.jit
    def forward(model, latents, context):
        captured = {}

        def capture(q, k, v, *, step, layer):
            captured[layer] = (q, k, v)
            return dense_attention(q, k, v)

        model(latents, jnp.full((2,), 900.0), context, attend=capture)
        return captured

    return model, forward(model, latents, context)


def _probabilities(q, k, head):
    scores = jnp.einsum("qd,kd->qk", q[0, QUERIES, head], k[0, :, head]) / 8.0
    return np.asarray(jax.nn.softmax(scores, axis=-1))


def test_planted_heads_attend_where_their_kind_says_and_inside_its_mask(planted):
    model, captured = planted
    layout = planted_layout(2, 4)
    policy = AttentionPolicy(
        load_schedule("balanced"), GEOMETRY, num_steps=10, num_layers=2, block_sizes=TILES
    )
    mask = policy.routing_mask
    frame_major = mask.allowed(QUERIES[:, None], INDEX[None, :])
    temporal_layout = mask.allowed(
        temporal_position(QUERIES, GEOMETRY)[:, None], temporal_position(INDEX, GEOMETRY)[None, :]
    )
    f, y, x = (a[QUERIES][:, None] for a in (FRAME, ROW, COLUMN))
    for layer, kinds in enumerate(layout):
        q, k, _ = captured[layer]
        for head, kind in enumerate(kinds):
            probs = _probabilities(q, k, head)
            if kind == "spatial":
                expected = (FRAME[None] == f) & (COLUMN[None] == x)
                own, other = frame_major, temporal_layout
            else:
                expected = (ROW[None] == y) & (COLUMN[None] == x) & (FRAME[None] <= f)
                own, other = temporal_layout, frame_major
            kept = {
                name: np.sum(probs * where, axis=-1)
                for name, where in (("expected", expected), ("own", own), ("other", other))
            }
            assert kept["expected"].min() > 0.99, (layer, head, kind)
            # The routed mask keeps almost all of it (b3's tile rounding trims the far rows of a
            # few spatial queries, by up to 18%)...
            assert kept["own"].mean() > 0.995 and kept["own"].min() > 0.8, (layer, head, kind)
            # ... the other mask loses about half of it.
            assert kept["other"].mean() < 0.6, (layer, head, kind)


@pytest.mark.parametrize("schedule", ["aggressive", "balanced", "conservative"])
def test_the_real_router_picks_the_planted_layout_for_every_head(planted, schedule):
    _, captured = planted
    policy = AttentionPolicy(
        load_schedule(schedule), GEOMETRY, num_steps=10, num_layers=2, block_sizes=TILES
    )
    for layer, kinds in enumerate(planted_layout(2, 4)):
        q, k, v = captured[layer]
        route = jax.jit(
            lambda q, k, v, key: route_heads(q, k, v, policy.routing_mask, GEOMETRY, key=key)
        )
        for step in (2, 9):
            routing = route(q, k, v, routing_key(42, step, layer))
            expected = np.asarray([[kind == "temporal" for kind in kinds]] * 2)
            np.testing.assert_array_equal(routing.temporal, expected)


def test_tiny_and_tiny_random_share_the_draw_not_the_attention_or_the_identity(planted, tmp_path):
    model, _ = planted
    random = tiny_transformer("tiny-random", 0)
    assert transformer_config_for(ModelConfig(name="tiny-planted")) == random.config == model.config
    # One seeded draw: everything but the self-attention's planted parts is shared.
    for path in (("ffn", "proj_in", "kernel"), ("attn2", "to_q", "kernel")):
        np.testing.assert_array_equal(_param(model, path), _param(random, path))
    np.testing.assert_array_equal(
        model.patch_embedding.kernel[...], random.patch_embedding.kernel[...]
    )
    assert not np.any(_param(random, ("attn1", "to_q", "bias")))  # plain init: zero bias
    assert np.any(_param(model, ("attn1", "to_q", "bias")))
    identities = {tiny_identity(name, 0) for name in ("tiny-planted", "tiny-random")}
    assert len(identities) == 2 and tiny_identity("tiny-planted", 1) not in identities
    cfg = resolved_run_config([f"output_root={tmp_path}", f"cache_dir={tmp_path}"])
    keys = {dense_arm_key(cfg, identity, 3.0, code="c", environment={}) for identity in identities}
    assert len(keys) == 2
    with pytest.raises(ValueError, match="seeded"):
        tiny_identity("wan2.1-t2v-1.3b", 0)


def _param(model, path):
    node = model.blocks[0]
    for name in path:
        node = getattr(node, name)
    return np.asarray(node[...])


def test_planting_keeps_the_parameter_dtype():
    config = WanTransformerConfig(
        num_attention_heads=2, attention_head_dim=64, ffn_dim=32, num_layers=1, text_dim=16
    )
    model = nnx.jit(lambda: WanTransformer(config, rngs=nnx.Rngs(0), param_dtype=jnp.bfloat16))()
    assert plant_heads(model) == planted_layout(1, 2)
    for attn in (block.attn1 for block in model.blocks):
        dtypes = {p[...].dtype for p in (attn.to_q.bias, attn.to_k.kernel, attn.to_v.kernel)}
        assert dtypes == {jnp.dtype(jnp.bfloat16)}
    assert model.proj_out.kernel[...].dtype == jnp.bfloat16


def _gate(row):
    return check_gate(row, min_psnr_db=25.0, min_speedup=None)


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_a_broken_arm_fails_the_default_gate_and_the_correct_arm_passes(tmp_path):
    """The default job on the planted model end to end (resolution, schedule, sampler, guidance,
    tiles), one dense arm, the correct sparse arm and the broken arm closest to the gate (every
    head spatial: temporal heads lose the frames between the previous one and the sink)."""
    cfg = resolved_run_config(
        ["model=tiny-planted", f"output_root={tmp_path}/o", f"cache_dir={tmp_path}/c"]
    )
    assert (cfg.resolution.name, cfg.schedule.name) == ("cpu", "balanced")
    correct, broken = measure_controls(cfg, ["none", "all_spatial"])
    assert _gate(correct).passed and correct["psnr_db"] > 40, correct
    assert correct["temporal_fraction"] == 0.5  # two of four heads per block are temporal
    assert not _gate(broken).passed and broken["psnr_db"] < 22, broken
    assert broken["temporal_fraction"] == 0.0


@pytest.mark.slow
def test_every_broken_arm_fails_the_default_gate(tmp_path):
    cfg = resolved_run_config(
        ["model=tiny-planted", f"output_root={tmp_path}/o", f"cache_dir={tmp_path}/c"]
    )
    rows = measure_controls(cfg)
    assert sound(rows), rows
    assert all(row["psnr_db"] < 22 for row in rows if row["control"] != "none"), rows
