"""The CPU's dense control "xla_flash" against the oracle, its chunk rule and its memory model; the
block-sparse scan's chunked query-tile groups against the oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from kernels.executors.dense_memory import dense_executor_temp_bytes, grows_quadratically
from kernels.executors.dispatch import attention
from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import blocksparse_attention
from kernels.executors.xla_flash import (
    FLASH_MIN_BLOCK_Q,
    FLASH_SCORE_ELEMENTS,
    flash_attention,
    flash_blocks,
)
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from kernels.policy import make_dense_attend
from tests.helpers.numerics import assert_allclose

# Relative to the output's magnitude, as for the other dense controls (test_dense_controls).
TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 2e-2}


def _qkv(shape, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(3 * jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)


def _assert_matches(out, expected, dtype):
    scale = float(jnp.max(jnp.abs(expected.astype(jnp.float32))))
    tol = TOLERANCE[dtype]
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert_allclose(out, expected, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    ("shape", "blocks"),
    [
        ((2, 300, 2, 64), None),  # one chunk and one key block, 300 not a multiple of 8
        ((1, 300, 2, 64), BlockSizes(64, 128)),  # ragged: 5 query chunks (20 rows padded),
        # 2 whole key blocks and a last step of 44 keys
        ((1, 1000, 3, 32), BlockSizes(136, 96)),  # neither chunk divides 1,000
        ((2, 17, 1, 8), None),  # shorter than a chunk
        ((1, 1024, 2, 128), BlockSizes(256, 256)),  # exact division: no last key step
        ((1, 777, 1, 64), BlockSizes(784, 8)),  # one chunk larger than N, many tiny key blocks
    ],
)
def test_matches_the_oracle(shape, blocks, dtype):
    q, k, v = _qkv(shape, dtype, seed=sum(shape))
    out = jax.jit(lambda q, k, v: flash_attention(q, k, v, block_sizes=blocks))(q, k, v)
    _assert_matches(out, reference_attention(q, k, v), dtype)


def test_dispatch_and_dense_attend_run_it_and_refuse_a_mask():
    q, k, v = _qkv((2, 2160, 4, 64), jnp.float32, seed=3)  # the default job's call
    expected = reference_attention(q, k, v)
    _assert_matches(attention(q, k, v, executor="xla_flash"), expected, jnp.float32)
    attend = make_dense_attend("xla_flash", block_sizes=BlockSizes(128, 128))  # b0's tiles: unused
    _assert_matches(attend(q, k, v, step=0, layer=0), expected, jnp.float32)
    geometry = TokenGeometry(9, 12, 20)
    with pytest.raises(ValueError, match="is a dense control"):
        attention(q, k, v, band_for_density(geometry, 0.5), executor="xla_flash")


def test_chunk_rule():
    # The geometry: 16 x 1,008 keys, 8 MiB of scores per step; the default job's call.
    assert flash_blocks(16_128, 1, 2) == BlockSizes(1008, 1008)
    assert flash_blocks(2160, 2, 4) == BlockSizes(360, 720)
    assert flash_blocks(300, 2, 2) == BlockSizes(304, 304)
    assert flash_blocks(1, 1, 1) == BlockSizes(8, 8)
    for tokens, batch, heads in [(75_600, 2, 40), (2160, 2, 4), (16_128, 1, 2), (5000, 1, 7)]:
        blocks = flash_blocks(tokens, batch, heads)
        assert blocks.block_q % 8 == 0 and blocks.block_kv % 8 == 0
        blocks.validate(tokens, "xla")
        scores = batch * heads * blocks.block_q * blocks.block_kv
        # Within the budget, or at the smallest query chunk (many heads).
        assert scores <= 1.1 * FLASH_SCORE_ELEMENTS or blocks.block_q <= FLASH_MIN_BLOCK_Q + 8
    with pytest.raises(ValueError, match="heads=0"):
        flash_blocks(100, 1, 0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1024, 2, 64), (2, 2160, 4, 64), (1, 16_128, 2, 128)])
def test_memory_model_bounds_the_compiled_temporaries(shape, dtype):
    b, n, h, d = shape
    spec = jax.ShapeDtypeStruct(shape, dtype)
    compiled = (
        jax.jit(lambda q, k, v: attention(q, k, v, executor="xla_flash"))
        .lower(spec, spec, spec)
        .compile()
    )
    measured = compiled.memory_analysis().temp_size_in_bytes
    model = dense_executor_temp_bytes(
        "xla_flash", batch=b, heads=h, tokens=n, head_dim=d, dtype_bytes=jnp.dtype(dtype).itemsize
    )
    # Measured 0.66-0.90x of the model at these sizes: a planning estimate that does not
    # undercount.
    assert 0.55 * model <= measured <= 1.0 * model, (measured, model)
    if n >= 16_128:  # no [N, N] array: far below one head's float32 logits (1 GiB here)
        assert measured < n * n * 4 / 10
    assert not grows_quadratically("xla_flash")


def test_memory_stays_linear_in_tokens():
    sizes = {"batch": 2, "heads": 40, "head_dim": 128, "dtype_bytes": 2}
    at_720p = dense_executor_temp_bytes("xla_flash", tokens=75_600, **sizes)
    doubled = dense_executor_temp_bytes("xla_flash", tokens=151_200, **sizes)
    assert doubled < 2.05 * at_720p
    assert at_720p < 1e-2 * dense_executor_temp_bytes(
        "dot_product_attention", tokens=75_600, **sizes
    )
    # block_q / block_kv are b0's and splash's: the dense attend runs xla_flash with its own.
    assert at_720p == dense_executor_temp_bytes(
        "xla_flash", tokens=75_600, block_q=128, block_kv=128, **sizes
    )


# One query tile per scan step (score_elements=1) is a long scan of small steps: b3 here, the
# other variants in the slow step; chunks of 3 tiles for every variant.
CHUNKINGS = [
    *(
        pytest.param(1, variant, marks=[pytest.mark.slow] if variant != "b3" else [])
        for variant in ("b0", "b1", "b2", "b3")
    ),
    *((3 * 64 * 64 * 2, variant) for variant in ("b0", "b1", "b2", "b3")),
]


@pytest.mark.parametrize(("score_elements", "variant"), CHUNKINGS)
def test_blocksparse_chunked_groups_match_the_oracle(variant, score_elements):
    # score_elements=1: one query tile per scan step; 3 tiles' worth: chunks of up to 3 tiles,
    # groups padded to whole chunks (the default budget runs these small tiles all together).
    geometry = TokenGeometry(5, 6, 10)  # 300 tokens: a padded last tile of 64
    q, k, v = _qkv((1, geometry.tokens, 2, 64), jnp.float32, seed=7)
    mask = band_for_density(geometry, 0.4)
    plan = build_plan(mask, BlockSizes(64, 64), variant)
    out = jax.jit(
        lambda q, k, v: blocksparse_attention(q, k, v, plan, score_elements=score_elements)
    )(q, k, v)
    expected = reference_attention(q, k, v, plan.logical_mask)
    _assert_matches(out, expected, jnp.float32)
    default = jax.jit(lambda q, k, v: blocksparse_attention(q, k, v, plan))(q, k, v)
    assert_allclose(out, default, atol=1e-5, rtol=1e-5)
