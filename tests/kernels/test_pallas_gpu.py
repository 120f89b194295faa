"""Pallas GPU (Triton) block-sparse kernel, run in interpret mode on CPU, against the dense oracle."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kernels.executors import pallas_gpu
from kernels.executors.dispatch import KernelOptions, attention
from kernels.executors.pallas_gpu import pallas_gpu_blocksparse_attention
from kernels.executors.pallas_gpu_visits import (
    encode_for_kernel,
    plan_gpu_visits,
    split_visit_slots,
)
from kernels.executors.pallas_tpu_visits import plan_visit_slots
from kernels.executors.xla_visit_code import RUNS, TABLE, decode_numpy
from kernels.masks.band import BandMask, PaddingMask, StridedTemporalMask
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import inverse_temporal_permutation, temporal_permutation
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from tests.helpers.attention import (
    F32_TOL,
    ORACLE_CASE_ARGS,
    check_against_oracle,
    check_kernel_case,
    numpy_qkv,
    oracle,
    oracle_case_ids,
    oracle_cases,
)
from tests.helpers.numerics import assert_allclose

_qkv = numpy_qkv
_check = check_against_oracle


CASES = oracle_cases("gpu")


@pytest.mark.parametrize(ORACLE_CASE_ARGS, CASES, ids=oracle_case_ids(CASES))
def test_matches_dense_masked_reference(
    variant, tokens, half_width, sink, block_q, block_kv, head_dim, dtype
):
    mask = PaddingMask(tokens) if variant == "b0" else BandMask(tokens, half_width, sink)
    check_kernel_case(
        pallas_gpu_blocksparse_attention, mask, variant, block_q, block_kv, head_dim, dtype
    )


def test_b2_walks_both_loops_and_equals_b1():
    """A wide band gives mask-free and masked visits; masking everything (b1) changes nothing."""
    tokens, block_sizes = 640, BlockSizes(64, 64)
    mask = BandMask(tokens, 260, 64)
    plan_b1 = build_plan(mask, block_sizes, "b1")
    plan_b2 = build_plan(mask, block_sizes, "b2")
    visits_b1, visits_b2 = plan_gpu_visits(plan_b1, "b1"), plan_gpu_visits(plan_b2, "b2")
    assert visits_b1.full is None and visits_b1.masked_visits == visits_b1.visited
    assert visits_b2.full is not None and 0 < visits_b2.masked_visits < visits_b2.visited
    q, k, v = _qkv(1, 1, tokens, 2, 64, jnp.float32)
    out_b1 = pallas_gpu_blocksparse_attention(q, k, v, plan_b1, variant="b1", interpret=True)
    out_b2 = pallas_gpu_blocksparse_attention(q, k, v, plan_b2, variant="B2", interpret=True)
    _check(out_b2, q, k, v, mask)
    assert_allclose(out_b2, out_b1, **F32_TOL)


@pytest.mark.parametrize("max_breaks", [8, 0], ids=["runs", "table"])
def test_strided_temporal_mask_in_kernel_with_runs_and_table_codes(max_breaks, monkeypatch):
    """A frame-major temporal mask (several runs per row), decoded from runs and from a table."""
    geometry = TokenGeometry(4, 8, 12)  # 384 tokens, 96 per frame
    mask = StridedTemporalMask(geometry, half_width=40)
    plan = build_plan(mask, BlockSizes(16, 16), "b2")
    visits = plan_gpu_visits(plan, "b2", max_breaks)
    codes = [c for c in (visits.full, visits.masked) if c is not None]
    if max_breaks:  # the masked list decodes from runs that break inside a row
        assert max(c.breaks for c in codes if c.kind == RUNS) > 0
    else:
        assert TABLE in {c.kind for c in codes}
    monkeypatch.setattr(
        pallas_gpu, "plan_gpu_visits", lambda p, v: plan_gpu_visits(p, v, max_breaks)
    )
    pallas_gpu._build_forward.cache_clear()  # build_plan is cached: the same plan object again
    q, k, v = _qkv(2, 1, geometry.tokens, 2, 128, jnp.float32)
    out = pallas_gpu_blocksparse_attention(q, k, v, plan, variant="b2", interpret=True)
    _check(out, q, k, v, mask)


@dataclasses.dataclass(frozen=True)
class _HandPlan:
    """The TilePlan fields the kernel reads, filled in by hand."""

    full_kv: np.ndarray
    full_count: np.ndarray
    partial_kv: np.ndarray
    partial_count: np.ndarray
    mask: object
    tokens: int
    block_sizes: tuple[int, int]


def test_padding_tile_listed_full_is_masked_and_empty_query_tile_is_zero():
    """A tile reaching past `tokens` is masked even when listed full; a query tile of pure
    padding with no visit leaves the real rows untouched."""
    tokens, block_q, block_kv = 200, 64, 128
    num_q, num_kv = 5, 2  # 320 query rows: tiles 0-3 hold tokens, tile 4 only padding
    plan = _HandPlan(
        full_kv=np.tile(np.arange(num_kv, dtype=np.int32), (num_q, 1)),
        full_count=np.array([2, 2, 2, 2, 0], np.int32),
        partial_kv=np.zeros((num_q, 1), np.int32),
        partial_count=np.zeros(num_q, np.int32),
        mask=PaddingMask(tokens),
        tokens=tokens,
        block_sizes=(block_q, block_kv),
    )
    visits = plan_gpu_visits(plan, "b0")
    assert visits.masked is not None and visits.masked_visits == 4  # tile 1 of rows 0-3
    q, k, v = _qkv(3, 1, tokens, 1, 64, jnp.float32)
    out = pallas_gpu_blocksparse_attention(q, k, v, plan, variant="b0", interpret=True)
    _check(out, q, k, v, None)


def _split_reference(slots):
    """One Python iteration per query tile: mask-free visits, then masked ones, key order."""
    kv = slots.kv_index.reshape(slots.num_q_tiles, slots.slots)
    masked = slots.masked.reshape(slots.num_q_tiles, slots.slots)
    rows = []
    for i in range(slots.num_q_tiles):
        n = slots.count[i]
        rows.append(
            (
                [int(x) for x, m in zip(kv[i, :n], masked[i, :n], strict=True) if not m],
                [int(x) for x, m in zip(kv[i, :n], masked[i, :n], strict=True) if m],
            )
        )
    return rows


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_split_lists_and_codes_match_a_per_row_reference(variant):
    geometry = TokenGeometry(5, 8, 10)  # 400 tokens
    mask = PaddingMask(400) if variant == "b0" else BandMask(400, 70, 40)
    plan = build_plan(mask, BlockSizes(32, 64), variant)
    slots = plan_visit_slots(plan, variant)
    full_kv, full_count, masked_kv, masked_count = split_visit_slots(slots)
    visits = plan_gpu_visits(plan, variant)
    for i, (full, masked) in enumerate(_split_reference(slots)):
        assert full_kv[i, : full_count[i]].tolist() == full
        assert masked_kv[i, : masked_count[i]].tolist() == masked
        for code, expected in ((visits.full, full), (visits.masked, masked)):
            if code is None:
                assert expected == []
            else:
                assert decode_numpy(code)[i, : len(expected)].tolist() == expected
    assert visits.visited == slots.visited and visits.masked_visits == slots.masked_visits
    assert geometry.tokens == plan.tokens


def test_too_many_runs_become_a_table_and_empty_lists_none():
    # Three breaks in row 0 (runs 0-4, 10-14, 20-24, 30-34), none in row 1.
    kv = np.array([[*range(0, 5), *range(10, 15), *range(20, 25), *range(30, 35)], list(range(20))])
    count = np.array([20, 20])
    assert encode_for_kernel(kv, count, max_breaks=8).kind == RUNS
    assert encode_for_kernel(kv, count, max_breaks=3).kind == RUNS
    table = encode_for_kernel(kv, count, max_breaks=2)
    assert table.kind == TABLE
    assert decode_numpy(table).tolist() == kv.tolist()
    assert encode_for_kernel(kv, np.zeros(2, np.int64)) is None


@settings(
    max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    frames=st.integers(2, 5),
    height=st.integers(3, 8),
    width=st.integers(3, 8),
    block_q=st.sampled_from([16, 32, 64]),
    block_kv=st.sampled_from([16, 32, 64]),
    width_fraction=st.floats(0.0, 1.0),
    variant=st.sampled_from(["b1", "b2", "b3"]),
    layout=st.sampled_from(["frame_major", "temporal_major", "strided"]),
    head_dim=st.sampled_from([64, 128]),
)
def test_random_shapes_densities_and_layouts(
    frames, height, width, block_q, block_kv, width_fraction, variant, layout, head_dim
):
    """Band + sink in the frame-major layout, the temporal head's band in the temporal-major
    layout (permute, attend, un-permute), and the same temporal mask evaluated in frame-major
    order; token counts rarely multiples of the tiles, so padding is exercised."""
    geometry = TokenGeometry(frames, height, width)
    n, per_frame = geometry.tokens, geometry.tokens_per_frame
    half_width = int(width_fraction * n / 2)
    q, k, v = _qkv(n, 1, n, 2, head_dim, jnp.float32)
    if layout == "strided":
        mask = StridedTemporalMask(geometry, half_width)
    else:
        mask = BandMask(n, half_width, per_frame)
    plan = build_plan(mask, BlockSizes(block_q, block_kv), variant, rounding_tolerance=None)
    if layout != "temporal_major":
        out = pallas_gpu_blocksparse_attention(q, k, v, plan, variant=variant, interpret=True)
        _check(out, q, k, v, plan.logical_mask)
        return
    order, restore = temporal_permutation(geometry), inverse_temporal_permutation(geometry)
    qt, kt, vt = (x[:, order] for x in (q, k, v))
    out = pallas_gpu_blocksparse_attention(qt, kt, vt, plan, variant=variant, interpret=True)
    expected = oracle(qt, kt, vt, plan.logical_mask)[:, restore]
    assert_allclose(out[:, restore], expected, **F32_TOL)


def test_dispatch_runs_the_kernel_under_jit_with_default_gpu_tiles():
    tokens = 300
    mask = BandMask(tokens, 90, 30)
    q, k, v = _qkv(4, 1, tokens, 2, 128, jnp.float32)
    run = jax.jit(
        lambda q, k, v: attention(
            q,
            k,
            v,
            mask,
            executor="b2",
            backend="pallas_gpu",
            options=KernelOptions(interpret=True),
        )
    )
    _check(run(q, k, v), q, k, v, mask)


def _small_plan(variant="b2", tokens=256, block_sizes=(64, 64)):
    return build_plan(BandMask(tokens, 80, 16), BlockSizes(*block_sizes), variant)


@pytest.mark.parametrize(
    "shape, dtype, kwargs, match",
    [
        ((1, 256, 1, 96), jnp.float32, {}, "head_dim 96"),
        ((1, 256, 1, 64), jnp.float16, {}, "float16"),
        ((1, 200, 1, 64), jnp.float32, {}, "200"),
        ((1, 256, 1, 64), jnp.float32, {"variant": "b3"}, "built for variant"),
        ((1, 256, 1, 64), jnp.float32, {"num_warps": 0}, "num_warps=0"),
    ],
)
def test_bad_inputs_name_the_problem(shape, dtype, kwargs, match):
    plan = _small_plan()
    kwargs = {"variant": "b2", **kwargs}
    x = jnp.zeros(shape, dtype)
    with pytest.raises(ValueError, match=match):
        pallas_gpu_blocksparse_attention(x, x, x, plan, interpret=True, **kwargs)


def test_tiles_that_are_not_powers_of_two_are_refused():
    plan = _HandPlan(
        full_kv=np.zeros((3, 1), np.int32),
        full_count=np.ones(3, np.int32),
        partial_kv=np.zeros((3, 1), np.int32),
        partial_count=np.zeros(3, np.int32),
        mask=PaddingMask(240),
        tokens=240,
        block_sizes=(96, 256),
    )
    x = jnp.zeros((1, 240, 1, 64), jnp.float32)
    with pytest.raises(ValueError, match="block_q 96 .* power of two"):
        pallas_gpu_blocksparse_attention(x, x, x, plan, variant="b0", interpret=True)


def test_compiling_off_gpu_asks_for_interpret():
    if jax.default_backend() == "gpu":
        pytest.skip("on a GPU the kernel compiles")
    x = jnp.zeros((1, 256, 1, 64), jnp.float32)
    with pytest.raises(ValueError, match="interpret=True"):
        pallas_gpu_blocksparse_attention(x, x, x, _small_plan(), variant="b2", interpret=False)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_compiled_on_gpu(variant, dtype, head_dim):
    """The same checks with Triton compilation (run with JAX_PLATFORMS=cuda on a GPU host)."""
    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU backend (run with JAX_PLATFORMS=cuda -m gpu)")
    tokens = 2000  # padded to the tiles
    mask = PaddingMask(tokens) if variant == "b0" else BandMask(tokens, 400, 256)
    plan = build_plan(mask, BlockSizes(128, 64), variant, rounding_tolerance=None)
    q, k, v = _qkv(5, 2, tokens, 4, head_dim, dtype)
    out = pallas_gpu_blocksparse_attention(q, k, v, plan, variant=variant, interpret=False)
    _check(out, q, k, v, plan.logical_mask)
