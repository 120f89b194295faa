"""The attention policy: sparse layouts vs the oracle, the tiny model end to end, routing stats."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from evalharness.evidence.run_folder import plot_temporal_fraction
from kernels.executors.dispatch import KernelOptions
from kernels.executors.reference import reference_attention
from kernels.masks.band import StridedTemporalMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy, make_dense_attend
from kernels.policy.schedule import SparsitySchedule
from models.attention import dense_attention
from models.config import get_transformer_config
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.transformer import WanTransformer
from tests.helpers.numerics import assert_allclose
from tests.helpers.schedules import SCHEDULE_NAMES, load_schedule

# 17 frames at 64 x 128 pixels: 5 latent frames of 8 x 16 latents, 5 x 4 x 8 = 160 tokens. Five
# frames keep the sink (frame 0) at 20% of the keys, below the aggressive schedule's 25%.
LATENT_SHAPE = (1, 16, 5, 8, 16)
GEOMETRY = TokenGeometry(5, 4, 8)
TILES = BlockSizes(8, 8)
STEPS = 5


def random_qkv(geometry: TokenGeometry, batch: int = 2, heads: int = 3, head_dim: int = 16):
    keys = jax.random.split(jax.random.key(11), 3)
    shape = (batch, geometry.tokens, heads, head_dim)
    return tuple(jax.random.normal(key, shape, jnp.float32) for key in keys)


def test_dense_schedule_is_exactly_the_dense_executor():
    q, k, v = random_qkv(GEOMETRY)
    policy = AttentionPolicy(load_schedule("dense"), GEOMETRY, num_steps=3, num_layers=2)
    dense = make_dense_attend("b0", block_sizes=policy.block_sizes)
    step = jnp.int32(1)
    np.testing.assert_array_equal(
        policy(q, k, v, step=step, layer=1), dense(q, k, v, step=step, layer=1)
    )
    jaxpr = jax.make_jaxpr(lambda q, k, v, s: policy(q, k, v, step=s, layer=1))(q, k, v, step)
    assert "cond" not in str(jaxpr)


@pytest.mark.parametrize("backend", ["xla", "reference"])
def test_sparse_attention_matches_the_oracle_for_mixed_routing(backend):
    geometry = TokenGeometry(4, 4, 6)
    q, k, v = random_qkv(geometry)
    temporal = jnp.asarray([[True, False, True], [False, False, True]])
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.4, variant="b2")
    policy = AttentionPolicy(
        schedule,
        geometry,
        num_steps=1,
        num_layers=1,
        backend=backend,
        block_sizes=BlockSizes(16, 16),
    )
    out = jax.jit(policy.sparse_attention)(q, k, v, temporal)
    band = band_for_density(geometry, 0.4)
    spatial = reference_attention(q, k, v, band)
    strided = reference_attention(q, k, v, StridedTemporalMask(geometry, band.half_width))
    expected = jnp.where(temporal[:, None, :, None], strided, spatial)
    assert_allclose(out, expected, atol=1e-5)


def test_b3_xla_and_reference_backends_agree():
    geometry = TokenGeometry(4, 4, 6)
    q, k, v = random_qkv(geometry)
    temporal = jnp.asarray([[False, True, True], [True, False, False]])
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.4)
    functions = [
        AttentionPolicy(
            schedule,
            geometry,
            num_steps=1,
            num_layers=1,
            backend=backend,
            block_sizes=BlockSizes(16, 16),
        ).sparse_attention
        for backend in ("xla", "reference")
    ]
    outs = [jax.jit(f)(q, k, v, temporal) for f in functions]
    assert_allclose(outs[0], outs[1], atol=1e-5)


@pytest.fixture(scope="module")
def tiny():
    config = get_transformer_config("tiny-planted")
    model = WanTransformer(config, rngs=nnx.Rngs(0))
    keys = jax.random.split(jax.random.key(1), 4)
    latents = jax.random.normal(keys[0], LATENT_SHAPE)
    other = jax.random.normal(keys[1], LATENT_SHAPE)
    context = jax.random.normal(keys[2], (1, config.text_len, config.text_dim))
    negative = jax.random.normal(keys[3], (1, config.text_len, config.text_dim))
    sampler = make_sampler("unipc", STEPS, 3.0)
    plain = DenoiseLoop(model, sampler)(latents, context, negative).latents
    return config, model, sampler, (latents, other, context, negative), plain


# Dense (bit-identical to the plain model) and balanced (the default) in the default suite; the
# other schedules differ from balanced only in their densities, each a compile of the tiny loop.
EVERY_SCHEDULE = [
    name if name in ("dense", "balanced") else pytest.param(name, marks=pytest.mark.slow)
    for name in SCHEDULE_NAMES
]


@pytest.mark.parametrize("name", EVERY_SCHEDULE)
def test_every_schedule_runs_the_tiny_model_compiling_once(tiny, name):
    config, model, sampler, (latents, other, context, negative), plain = tiny
    policy = AttentionPolicy(
        load_schedule(name),
        GEOMETRY,
        num_steps=STEPS,
        num_layers=config.num_layers,
        block_sizes=TILES,
        dense_attend=dense_attention,
    )
    loop = DenoiseLoop(model, sampler, attend=policy)
    first = loop(latents, context, negative)
    second = loop(other, context, negative)
    assert bool(first.finite) and bool(second.finite)
    assert loop.trace_count == 1 and loop.cache_size == 1
    if name == "dense":
        np.testing.assert_array_equal(first.latents, plain)  # bit-identical to the plain model
    else:
        assert not np.array_equal(first.latents, plain)  # the sparse path really ran


def _recording_probe_policy(config) -> tuple[SparsitySchedule, AttentionPolicy]:
    """floor(0.4 * 5) = 2 dense steps and floor(0.5 * 2) = 1 dense layer; routing recorded."""
    schedule = SparsitySchedule("probe", 0.4, 0.5, 0.35)
    policy = AttentionPolicy(
        schedule,
        GEOMETRY,
        num_steps=STEPS,
        num_layers=config.num_layers,
        block_sizes=TILES,
        record_stats=True,
        seed=3,
    )
    return schedule, policy


@pytest.mark.slow
def test_separate_guidance_passes_record_the_same_routing_and_latents(tiny):
    # Two batch-1 passes per step (a loop over cond and uncond) route each sample as the joint
    # batch of 2 does; the unconditional pass's records land at batch index 1.
    config, model, sampler, (latents, _, context, negative), _ = tiny
    runs = {}
    for passes in ("joint", "separate"):
        _, policy = _recording_probe_policy(config)
        loop = DenoiseLoop(model, sampler, attend=policy, guidance_passes=passes)
        runs[passes] = (loop(latents, context, negative).latents, policy.stats)
    (joint, joint_stats), (separate, separate_stats) = runs["joint"], runs["separate"]
    assert separate_stats.temporal.shape == (
        STEPS,
        config.num_layers,
        2,
        config.num_attention_heads,
    )
    np.testing.assert_array_equal(separate_stats.temporal, joint_stats.temporal)
    for name in ("spatial_error", "temporal_error"):
        assert_allclose(
            getattr(separate_stats, name), getattr(joint_stats, name), rtol=1e-4, atol=1e-6
        )
    scale = float(np.max(np.abs(joint)))
    assert_allclose(separate, joint, rtol=1e-4, atol=1e-5 * scale)


def test_recorded_routing_flips_without_recompiling(tiny, tmp_path):
    config, model, sampler, (latents, other, context, negative), _ = tiny
    schedule, policy = _recording_probe_policy(config)
    loop = DenoiseLoop(model, sampler, attend=policy)
    loop(latents, context, negative)
    stats_first = policy.stats
    loop(other, context, negative)
    stats = policy.stats
    assert loop.trace_count == 1

    shape = (STEPS, config.num_layers, 2, config.num_attention_heads)  # guided batch of 2
    assert stats.temporal.shape == stats.spatial_error.shape == shape
    dense = np.array(
        [
            [
                schedule.is_dense(s, layer, steps=STEPS, layers=config.num_layers)
                for layer in range(2)
            ]
            for s in range(STEPS)
        ]
    )
    # The callback lives in the sparse branch of lax.cond: dense cells were never routed.
    np.testing.assert_array_equal(stats.sparse_cells, ~dense)
    assert np.all(stats.temporal[dense] == -1) and np.all(np.isnan(stats.spatial_error[dense]))
    routed = stats.temporal[~dense]
    assert set(np.unique(routed)) == {0, 1}  # routing flips between heads, steps or runs ...
    assert (
        not np.array_equal(stats_first.temporal, stats.temporal)
        or len({cell.tobytes() for cell in routed}) > 1
    )  # ... and across (step, layer) cells or runs, all with one compilation
    errors = stats.temporal_error[~dense] < stats.spatial_error[~dense]
    np.testing.assert_array_equal(routed == 1, errors)
    fraction = stats.temporal_fraction()
    assert np.all(np.isnan(fraction[dense]))
    assert_allclose(fraction[~dense], (routed == 1).mean(axis=(1, 2)), atol=1e-12)

    png = plot_temporal_fraction(stats, tmp_path / "maps" / "routing.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_rejected_clearly():
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.4)
    with pytest.raises(ValueError, match="backend='tpu'"):
        AttentionPolicy(schedule, GEOMETRY, num_steps=2, num_layers=2, backend="tpu")
    with pytest.raises(ValueError, match="routing_mode='all'"):
        AttentionPolicy(schedule, GEOMETRY, num_steps=2, num_layers=2, routing_mode="all")
    with pytest.raises(ValueError, match="density=0.25"):
        AttentionPolicy(
            SparsitySchedule("s", 0.0, 0.0, 0.25),
            GEOMETRY,
            num_steps=2,
            num_layers=2,
            block_sizes=BlockSizes(16, 16),
        )
    with pytest.raises(ValueError, match="executor='b3'"):
        make_dense_attend("b3")
    policy = AttentionPolicy(schedule, GEOMETRY, num_steps=2, num_layers=2, block_sizes=TILES)
    q, k, v = random_qkv(GEOMETRY)
    with pytest.raises(ValueError, match="layer=2"):
        policy(q, k, v, step=0, layer=2)
    with pytest.raises(ValueError, match=r"expected \[batch, 160"):
        policy(q[:, :80], k[:, :80], v[:, :80], step=0, layer=0)
    with pytest.raises(ValueError, match="record_stats=True"):
        _ = policy.stats
    with pytest.raises(ValueError, match="batch, heads"):
        policy.sparse_attention(q, k, v, jnp.zeros((3,), bool))


@pytest.mark.parametrize(
    "backend, tiles", [("pallas_tpu", BlockSizes(128, 128)), ("pallas_gpu", BlockSizes(128, 64))]
)
def test_pallas_backends_in_interpret_mode_match_the_reference(backend, tiles):
    # 512 tokens: four 128-token tiles (the Pallas TPU minimum); powers of two for Triton. One
    # temporal head (permute, band, un-permute) and one spatial head.
    geometry = TokenGeometry(4, 8, 16)
    q, k, v = random_qkv(geometry, batch=1, heads=2, head_dim=64)
    temporal = jnp.asarray([[True, False]])
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.5)
    outs = [
        AttentionPolicy(
            schedule,
            geometry,
            num_steps=1,
            num_layers=1,
            backend=name,
            block_sizes=tiles,
            options=KernelOptions(interpret=True),
        ).sparse_attention(q, k, v, temporal)
        for name in (backend, "reference")
    ]
    assert_allclose(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_pallas_gpu_launch_settings_reach_the_kernel(monkeypatch):
    # num_warps and num_stages pass from the policy (sparse band and default dense b0) through
    # the dispatch to the kernel, and only there.
    from kernels.executors import pallas_gpu

    seen = []

    def record(q, k, v, plan, **kwargs):
        seen.append((plan.variant, kwargs["num_warps"], kwargs["num_stages"]))
        return q

    monkeypatch.setattr(pallas_gpu, "pallas_gpu_blocksparse_attention", record)
    geometry = TokenGeometry(4, 8, 16)
    q, k, v = random_qkv(geometry, batch=1, heads=2, head_dim=64)
    options = KernelOptions(num_warps=4, num_stages=3)
    policy = AttentionPolicy(
        SparsitySchedule("s", 0.0, 0.0, 0.5, variant="b2"),
        geometry,
        num_steps=1,
        num_layers=1,
        backend="pallas_gpu",
        block_sizes=BlockSizes(128, 64),
        options=options,
    )
    policy.execute_band(q, k, v)
    policy.dense_attend(q, k, v, step=0, layer=0)
    make_dense_attend("b0", backend="pallas_gpu", block_sizes=BlockSizes(64, 64), options=options)(
        q, k, v
    )
    assert seen == [("b2", 4, 3), ("b0", 4, 3), ("b0", 4, 3)]
    make_dense_attend("b0", backend="xla", options=options)(q, k, v)  # ignored off Pallas
    assert len(seen) == 3


def test_pallas_gpu_tiles_must_be_powers_of_two():
    schedule = SparsitySchedule("s", 0.0, 0.0, 0.5)
    geometry = TokenGeometry(4, 8, 16)
    with pytest.raises(ValueError, match="power of two"):
        AttentionPolicy(
            schedule,
            geometry,
            num_steps=1,
            num_layers=1,
            backend="pallas_gpu",
            block_sizes=BlockSizes(96, 64),
        )


def test_sparse_branch_is_the_policys_sparse_cell():
    q, k, v = random_qkv(GEOMETRY)
    policy = AttentionPolicy(
        load_schedule("aggressive"), GEOMETRY, num_steps=STEPS, num_layers=4, block_sizes=TILES
    )
    step = policy.dense_steps  # the first sparse step
    layer = policy.dense_layers
    assert policy.is_sparse_layer(layer)
    assert_allclose(
        policy.sparse_branch(q, k, v, step=jnp.int32(step), layer=layer),
        policy(q, k, v, step=step, layer=layer),
        atol=0,
    )
    dense = AttentionPolicy(
        load_schedule("dense"), GEOMETRY, num_steps=STEPS, num_layers=4, block_sizes=TILES
    )
    with pytest.raises(ValueError, match="is not sparse"):
        dense.sparse_branch(q, k, v, step=jnp.int32(0), layer=0)
