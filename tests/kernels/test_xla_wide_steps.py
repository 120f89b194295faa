"""Wide scan steps of the XLA block-sparse executor: several listed tiles per matmul, same result."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import blocksparse_attention, visit_groups
from kernels.executors.xla_scan_steps import WIDE_STEP_KEYS, wide_step_tiles
from kernels.masks.band import band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from tests.helpers.numerics import assert_allclose

GEOMETRY = TokenGeometry(4, 3, 5)  # 60 tokens


def _qkv(shape, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, shape, jnp.float32) for key in keys)


@pytest.mark.parametrize("variant", ["b1", "b2", "b3"])
@pytest.mark.parametrize("width", [2, 3, 5])
@pytest.mark.parametrize("max_groups", [1, 8])
def test_wide_steps_equal_the_reference(variant, width, max_groups):
    # One group (max_groups=1) pads short lists inside wide steps; 8 groups leave tails of
    # steps % width single steps; b1/b2 also scan partial (masked) tiles in wide steps.
    plan = build_plan(band_for_density(GEOMETRY, 0.3), BlockSizes(8, 8), variant, None)
    groups = visit_groups(plan, max_groups)
    if max_groups == 1:
        assert groups.wasted_fraction > 0
    if (width, max_groups) == (2, 8):  # some list ends in a single (tail) step
        assert any(g.full_kv.shape[1] % 2 or g.partial_kv.shape[1] % 2 for g in groups.groups)
    q, k, v = _qkv((2, GEOMETRY.tokens, 2, 16), seed=width)
    out = blocksparse_attention(q, k, v, plan, max_groups=max_groups, tiles_per_step=width)
    assert_allclose(out, reference_attention(q, k, v, plan.logical_mask), atol=1e-5, rtol=1e-5)


def test_wide_steps_on_a_strided_mask_with_rows_that_see_nothing_yet():
    # A strided mask's partial tiles leave some rows with no kept key in a whole wide step.
    plan = build_plan(strided_temporal_mask(GEOMETRY, 0.3), BlockSizes(8, 16), "b3", None)
    q, k, v = _qkv((1, GEOMETRY.tokens, 3, 16), seed=7)
    narrow = blocksparse_attention(q, k, v, plan, tiles_per_step=1)
    wide = blocksparse_attention(q, k, v, plan, tiles_per_step=2)
    expected = reference_attention(q, k, v, plan.logical_mask)
    assert np.isfinite(np.asarray(wide)).all()
    assert_allclose(wide, expected, atol=1e-5, rtol=1e-5)
    assert_allclose(wide, narrow, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("block_q", "block_kv", "rows", "width"),
    [
        (768, 768, 2, 2),  # the kernel benchmark's tiles, 2 heads: two tiles per step
        (512, 512, 2, 3),
        (1024, 1024, 2, 1),  # already wide
        (128, 128, 8, 1),  # the CPU's default tiles: small steps gain nothing
        (768, 768, 24, 1),  # one query tile's scores already exceed the budget
        (3328, 1536, 1, 1),  # the seed's TPU tiles
    ],
)
def test_default_width_rule(block_q, block_kv, rows, width):
    assert wide_step_tiles(block_q, block_kv, rows, kv_tiles=64) == width
    assert wide_step_tiles(block_q, block_kv, rows, 64) * block_kv <= max(WIDE_STEP_KEYS, block_kv)
    # No step is wider than the sequence's key tiles.
    assert wide_step_tiles(block_q, block_kv, rows, kv_tiles=1) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_width_is_refused(bad):
    plan = build_plan(band_for_density(GEOMETRY, 0.3), BlockSizes(8, 8), "b3", None)
    q, k, v = _qkv((1, GEOMETRY.tokens, 1, 16))
    with pytest.raises(ValueError, match="tiles_per_step"):
        blocksparse_attention(q, k, v, plan, tiles_per_step=bad)
