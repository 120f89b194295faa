"""The XLA executor embeds its visit lists as small codes, not per-call multi-megabyte constants."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import blocksparse_attention, visit_groups
from kernels.executors.xla_visit_code import (
    RUNS,
    TABLE,
    decode_numpy,
    decoder,
    encode_visits,
    narrowest_int,
)
from kernels.masks.band import band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import _visit_lists, build_plan
from tests.helpers.numerics import assert_allclose

# Per-device Wan 14B shapes after the 8-way sequence-parallel all-to-all: 40 heads / 8 = 5.
GEOMETRY_1440P = TokenGeometry(21, 90, 160)  # 302,400 tokens, 591 tiles of 512 per axis
# Measured: module text 52-159 KiB and constants 14-27 KiB per call for b0-b3 (it was 3.7-5.0 MiB,
# nearly all constants). The bounds leave room for codegen changes, not for per-tile tables.
MAX_MODULE_BYTES = 512 * 1024
MAX_CONSTANT_BYTES = 64 * 1024


def _constant_bytes(module_text: str) -> int:
    return sum(len(line) for line in module_text.splitlines() if "stablehlo.constant" in line)


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_one_call_at_1440p_lowers_to_a_small_module(variant):
    # Lowering only (no compile, no execution): ~1 s per variant.
    plan = build_plan(band_for_density(GEOMETRY_1440P, 0.3887), BlockSizes(512, 512), variant)
    shape = jax.ShapeDtypeStruct((2, GEOMETRY_1440P.tokens, 5, 128), jnp.bfloat16)
    text = (
        jax.jit(lambda q, k, v: blocksparse_attention(q, k, v, plan))
        .lower(shape, shape, shape)
        .as_text()
    )
    assert len(text) < MAX_MODULE_BYTES, len(text)
    assert _constant_bytes(text) < MAX_CONSTANT_BYTES, _constant_bytes(text)


def test_narrowest_int():
    assert narrowest_int(np.array([-128, 127])).dtype == np.int8
    assert narrowest_int(np.array([0, 128])).dtype == np.int16
    assert narrowest_int(np.array([-32769])).dtype == np.int32
    assert narrowest_int(np.zeros((0, 3), np.int64)).dtype == np.int8
    with pytest.raises(ValueError, match="beyond int32"):
        narrowest_int(np.array([2**31]))


def _random_lists(rng, sorted_rows):
    g, steps, tiles = int(rng.integers(1, 12)), int(rng.integers(1, 30)), int(rng.integers(1, 300))
    if sorted_rows:  # a plan's lists: ascending tiles, padding repeats the last valid one
        kv, count = _visit_lists(rng.random((g, tiles)) < rng.choice([0.05, 0.5, 0.95]))
        return kv, count
    kv = rng.integers(0, tiles, (g, steps)).astype(np.int32)
    kv[:, steps // 2 :] = kv[:, :1] + np.arange(steps - steps // 2)  # some runs
    return kv, rng.integers(0, steps + 1, g).astype(np.int32)


@pytest.mark.parametrize("sorted_rows", [True, False])
def test_codes_decode_to_the_lists(sorted_rows):
    rng = np.random.default_rng(int(sorted_rows))
    kinds = set()
    for _ in range(8):  # each a compile of its own; both kinds come up within 8 (checked below)
        kv, count = _random_lists(rng, sorted_rows)
        code = encode_visits(kv, count)
        kinds.add(code.kind)
        assert code.steps == kv.shape[1] and code.padded == bool((count < kv.shape[1]).any())
        assert code.code.dtype == narrowest_int(code.code).dtype
        host = decode_numpy(code)
        decode = jax.jit(jax.vmap(lambda j, code=code: decoder(code)(j)[0], out_axes=1))
        graph = np.asarray(decode(jnp.arange(code.steps, dtype=jnp.int32)))
        assert np.array_equal(graph, host)
        valid = np.arange(kv.shape[1])[None, :] < count[:, None]
        assert np.array_equal(np.where(valid, host, 0), np.where(valid, kv, 0))
        if sorted_rows:  # the padding too: a plan's table exactly
            assert np.array_equal(host, kv)
    assert kinds == {RUNS, TABLE}


def test_band_lists_cost_a_few_columns_per_query_tile():
    plan = build_plan(
        band_for_density(TokenGeometry(21, 45, 80), 0.3887), BlockSizes(512, 512), "b1"
    )
    for group in visit_groups(plan).groups:
        code = group.partial_code
        assert code.kind == RUNS and code.breaks <= 1 and code.code.dtype.itemsize <= 2
        assert code.code.shape == (group.q_tiles.size, 2 + 2 * code.breaks)


@pytest.mark.parametrize(
    ("variant", "max_groups", "grid", "kinds", "padded"),
    [
        ("b1", 1, (4, 3, 5), {RUNS}, True),  # runs with breaks, padded rows
        ("b2", 8, (3, 4, 5), {TABLE}, False),  # plain tables
        ("b3", 1, (5, 3, 4), {RUNS, TABLE}, True),  # both kinds, padded rows
    ],
)
def test_executor_decodes_codes_in_graph(variant, max_groups, grid, kinds, padded):
    geometry = TokenGeometry(*grid)  # 60 tokens
    plan = build_plan(strided_temporal_mask(geometry, 0.3), BlockSizes(8, 8), variant, None)
    groups = visit_groups(plan, max_groups).groups
    codes = [c for g in groups for c in (g.full_code, g.partial_code) if c is not None]
    assert ({c.kind for c in codes}, any(c.padded for c in codes)) == (kinds, padded)
    assert variant != "b1" or max(c.breaks for c in codes) > 0
    keys = jax.random.split(jax.random.key(4), 3)
    q, k, v = (jax.random.normal(key, (1, geometry.tokens, 2, 64), jnp.float32) for key in keys)
    out = blocksparse_attention(q, k, v, plan, max_groups=max_groups)
    assert_allclose(out, reference_attention(q, k, v, plan.logical_mask), atol=1e-5)
