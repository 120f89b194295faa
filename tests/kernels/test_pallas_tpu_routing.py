"""Routing's sampled outputs as a Pallas TPU kernel (interpret mode) against the XLA oracle, its
decisions on the synthetic spectrum, and the rule that hands it to the policy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.dispatch import KernelOptions
from kernels.executors.pallas_tpu_routing import keep_codes, pallas_sampled_outputs
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import (
    SampledOutputs,
    layout_keeps,
    route_rows,
    routing_outputs_for,
    sampled_outputs,
)
from kernels.policy.schedule import SparsitySchedule
from kernels.policy.synthetic_heads import SPECTRUM, mixed_head
from models.accelerator_env import libtpu_installed
from tests.helpers.schedules import load_schedule
from tests.helpers.wan_block import GRID_480P, compiled_for_v5e, wan13b_block_480p


def _inputs(batch, tokens, heads, head_dim, rows, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 5)
    q = jax.random.normal(keys[0], (batch, rows, heads, head_dim)) * 2.0
    k = jax.random.normal(keys[1], (batch, tokens, heads, head_dim)) * 2.0
    v = jax.random.normal(keys[2], (batch, tokens, heads, head_dim))
    # Every row keeps at least one key under each mask (as a band keeps the row's own token).
    spatial = jax.random.bernoulli(keys[3], 0.3, (rows, tokens)).at[:, 0].set(True)
    temporal = jax.random.bernoulli(keys[4], 0.3, (rows, tokens)).at[:, tokens - 1].set(True)
    return tuple(x.astype(dtype) for x in (q, k, v)) + (spatial, temporal)


def _close(got, want, rel):
    """Each output within ``rel`` of the oracle's largest magnitude."""
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=rel * float(np.max(np.abs(w))))


@pytest.mark.parametrize(
    ("head_dim", "tokens", "rows", "block_rows", "block_kv"),
    [
        (128, 300, 24, 256, 128),  # in place, ragged last key tile
        (128, 256, 8, 256, None),  # in place, one key tile
        (64, 300, 40, 16, 128),  # heads-leading, ragged last row tile and key tile
        (128, 1000, 64, 32, 256),  # two row tiles, four key tiles, ragged
    ],
    ids=["in-place-ragged", "one-tile", "heads-leading-ragged-rows", "row-tiles"],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_equals_the_xla_oracle(head_dim, tokens, rows, block_rows, block_kv, dtype):
    q_rows, k, v, spatial, temporal = _inputs(2, tokens, 3, head_dim, rows, dtype)
    got = pallas_sampled_outputs(
        q_rows, k, v, spatial, temporal, block_rows=block_rows, block_kv=block_kv, interpret=True
    )
    want = sampled_outputs(q_rows, k, v, spatial, temporal)
    assert all(x.dtype == jnp.float32 for x in got)
    # float32: summation order only; bfloat16: the probabilities rounded to v's dtype.
    _close(got, want, 1e-5 if dtype == jnp.float32 else 2e-2)


def test_each_mask_keeps_its_own_keys():
    """Moving a key the temporal mask drops changes only the dense and spatial outputs."""
    q_rows, k, v, spatial, temporal = _inputs(1, 256, 1, 128, 8, jnp.float32)
    spatial = spatial.at[:, 7].set(True)
    temporal = temporal.at[:, 7].set(False)
    base = pallas_sampled_outputs(q_rows, k, v, spatial, temporal, interpret=True)
    moved = pallas_sampled_outputs(
        q_rows, k, v.at[:, 7].multiply(5.0), spatial, temporal, interpret=True
    )
    np.testing.assert_array_equal(np.asarray(base[2]), np.asarray(moved[2]))
    assert not np.allclose(np.asarray(base[0]), np.asarray(moved[0]))
    assert not np.allclose(np.asarray(base[1]), np.asarray(moved[1]))


def test_keep_codes_say_which_masks_keep_a_pair():
    spatial = jnp.asarray([[True, False, True, False]])
    temporal = jnp.asarray([[False, True, True, False]])
    np.testing.assert_array_equal(
        np.asarray(keep_codes(spatial, temporal, jnp.bfloat16), np.float32), [[1, 2, 3, 0]]
    )


def test_decisions_on_the_synthetic_spectrum_equal_the_oracles():
    """One synthetic head per temporal share, every row routed: the kernel's errors equal the
    oracle's up to float32 summation order and every head goes the same way."""
    geometry = TokenGeometry(6, 6, 8)  # 288 tokens
    q, k, v = mixed_head(geometry, SPECTRUM)
    mask = band_for_density(geometry, 0.3)
    rows = jnp.arange(geometry.tokens, dtype=jnp.int32)
    kernel = routing_outputs_for("pallas_tpu", interpret=True)
    got = route_rows(q, k, v, rows, mask, geometry, outputs=kernel)
    want = route_rows(q, k, v, rows, mask, geometry)
    np.testing.assert_array_equal(np.asarray(got.temporal), np.asarray(want.temporal))
    assert np.asarray(want.temporal).any() and not np.asarray(want.temporal).all()
    for g, w in (
        (got.spatial_error, want.spatial_error),
        (got.temporal_error, want.temporal_error),
    ):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4)


def _policy(backend: str) -> AttentionPolicy:
    return AttentionPolicy(
        SparsitySchedule("s", 0.0, 0.0, 0.5, routing_samples=32),
        TokenGeometry(4, 8, 16),  # 512 tokens: four 128-token tiles
        num_steps=1,
        num_layers=1,
        backend=backend,
        block_sizes=BlockSizes(128, 128),
        options=KernelOptions(interpret=True),
    )


def test_only_pallas_tpu_runs_it():
    for backend in ("xla", "pallas_gpu", "reference"):
        assert routing_outputs_for(backend) is sampled_outputs
        assert _policy(backend).routing_outputs is sampled_outputs
    assert _policy("pallas_tpu").routing_outputs is not sampled_outputs


@pytest.mark.slow  # two policies route a guided batch, one in the Pallas interpreter: about 5 s
def test_the_policy_routes_with_it_as_with_xla():
    tpu, xla = _policy("pallas_tpu"), _policy("xla")
    geometry = tpu.geometry
    q, k, v = _inputs(2, geometry.tokens, 2, 128, geometry.tokens, jnp.float32)[:3]
    got, want = (p.route(q, k, v, step=jnp.int32(0), layer=0) for p in (tpu, xla))
    np.testing.assert_array_equal(np.asarray(got.temporal), np.asarray(want.temporal))
    np.testing.assert_allclose(np.asarray(got.spatial_error), np.asarray(want.spatial_error), 1e-4)
    # The outputs it returns are typed as the oracle's.
    keeps = layout_keeps(tpu.routing_mask, jnp.arange(8, dtype=jnp.int32), geometry)
    assert isinstance(tpu.routing_outputs(q[:, :8], k, v, *keeps), SampledOutputs)


def test_refuses_mismatched_shapes_and_tiles():
    q_rows, k, v, spatial, temporal = _inputs(1, 256, 2, 128, 8, jnp.float32)
    with pytest.raises(ValueError, match="do not match q_rows"):
        pallas_sampled_outputs(q_rows, k[:, :, :1], v[:, :, :1], spatial, temporal, interpret=True)
    with pytest.raises(ValueError, match=r"expected \[R, N\]"):
        pallas_sampled_outputs(q_rows, k, v, spatial[:4], temporal, interpret=True)
    with pytest.raises(ValueError, match="block_rows=24: expected a positive multiple of 16"):
        pallas_sampled_outputs(q_rows, k, v, spatial, temporal, block_rows=24, interpret=True)
    with pytest.raises(ValueError, match="block_kv=100"):
        pallas_sampled_outputs(q_rows, k, v, spatial, temporal, block_kv=100, interpret=True)


@pytest.mark.tpu
@pytest.mark.parametrize("head_dim", [128, 64])
def test_compiled_on_tpu(head_dim):
    """The kernel compiled by Mosaic (run with JAX_PLATFORMS=tpu on a TPU host): 64 sampled rows,
    a ragged last key tile, bfloat16, against the oracle."""
    if jax.default_backend() != "tpu":
        pytest.skip("needs a TPU backend")
    q_rows, k, v, spatial, temporal = _inputs(2, 5000, 4, head_dim, 64, jnp.bfloat16)
    got = jax.jit(pallas_sampled_outputs)(q_rows, k, v, spatial, temporal)
    _close(got, sampled_outputs(q_rows, k, v, spatial, temporal), 2e-2)


@pytest.mark.slow  # libtpu compiles two Wan 1.3B sparse blocks at 480p for v5e: about 60 s
@pytest.mark.skipif(not libtpu_installed(), reason="needs libtpu: pip install -e '.[tpu]'")
def test_in_a_wan_sparse_block_compiled_for_v5e_the_scores_leave_hbm():
    """Wan 1.3B's sparse block at 480p (32,760 tokens, bf16, balanced, b3 at 3,328 x 1,536),
    compiled for a TPU v5e from this CPU: with the kernel, routing is one custom call and XLA's
    count of the bytes the block moves falls by more than the oracle's float32 scores
    [2, 12, 64, 32,760] written once (routing's other passes over them come on top)."""
    block = wan13b_block_480p()
    policy = AttentionPolicy(
        load_schedule("balanced"),
        TokenGeometry(*GRID_480P),
        num_steps=4,
        num_layers=block.config.num_layers,
        backend="pallas_tpu",
        block_sizes=BlockSizes(3328, 1536),
    )

    def compiled(outputs):
        policy.routing_outputs = outputs

        def sparse(q, k, v, **_):
            return policy.sparse_branch(q, k, v, step=jnp.int32(3), layer=1)

        return compiled_for_v5e(block, sparse)

    kernel_text, kernel_bytes = compiled(routing_outputs_for("pallas_tpu"))
    oracle_text, oracle_bytes = compiled(sampled_outputs)
    assert "routing_outputs" in kernel_text and "routing_outputs" not in oracle_text
    scores_bytes = 2 * block.config.num_attention_heads * 64 * block.tokens * 4
    assert kernel_bytes < oracle_bytes - scores_bytes
