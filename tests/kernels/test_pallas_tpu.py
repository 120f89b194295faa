"""Pallas TPU block-sparse kernel, run in interpret mode on CPU, against dense masked attention."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kernels.executors.pallas_tpu import pallas_blocksparse_attention
from kernels.executors.pallas_tpu_visits import (
    CODE_PACK_LIMIT,
    build_visit_slots,
    plan_visit_slots,
    unpack_codes,
)
from kernels.masks.band import BandMask, PaddingMask, StridedTemporalMask
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from tests.helpers.attention import (
    F32_TOL,
    ORACLE_CASE_ARGS,
    check_against_oracle,
    check_kernel_case,
    numpy_qkv,
    oracle_case_ids,
    oracle_cases,
)
from tests.helpers.numerics import assert_allclose

_qkv = numpy_qkv
_check = check_against_oracle


CASES = oracle_cases("tpu")


@pytest.mark.parametrize(ORACLE_CASE_ARGS, CASES, ids=oracle_case_ids(CASES))
def test_matches_dense_masked_reference(
    variant, tokens, half_width, sink, block_q, block_kv, head_dim, dtype
):
    mask = BandMask(tokens, half_width, sink)
    check_kernel_case(
        pallas_blocksparse_attention, mask, variant, block_q, block_kv, head_dim, dtype
    )


def test_b2_runs_both_paths_and_equals_b1():
    """A wide band gives full and partial tiles; masking everything (b1) must not change a bit."""
    tokens, block_sizes = 640, BlockSizes(64, 128)
    mask = BandMask(tokens, 260, 64)
    plan_b1 = build_plan(mask, block_sizes, "b1")
    plan_b2 = build_plan(mask, block_sizes, "b2")
    slots = build_visit_slots(
        plan_b2.full_kv,
        plan_b2.full_count,
        plan_b2.partial_kv,
        plan_b2.partial_count,
        variant="b2",
        tokens=tokens,
        block_kv=128,
    )
    assert 0 < slots.masked_visits < slots.visited
    q, k, v = _qkv(1, 1, tokens, 2, 64, jnp.float32)
    out_b1 = pallas_blocksparse_attention(q, k, v, plan_b1, variant="b1", interpret=True)
    out_b2 = pallas_blocksparse_attention(q, k, v, plan_b2, variant="B2", interpret=True)
    _check(out_b2, q, k, v, mask)
    assert_allclose(out_b2, out_b1, **F32_TOL)


def test_key_chunking_and_strided_temporal_mask():
    """block_kv split into compute chunks; a non-band predicate (strided temporal) in-kernel."""
    geometry = TokenGeometry(4, 8, 12)  # 384 tokens, 96 per frame
    mask = StridedTemporalMask(geometry, half_width=40)
    plan = build_plan(mask, BlockSizes(64, 256), "b2")
    q, k, v = _qkv(2, 1, geometry.tokens, 2, 128, jnp.float32)
    out = pallas_blocksparse_attention(
        q, k, v, plan, variant="b2", interpret=True, block_kv_compute=128
    )
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


def _hand_dense_plan(tokens: int, block_q: int, block_kv: int, num_q: int, num_kv: int):
    """A b0 plan listing every (query, key) tile pair as full, padding tiles included."""
    return _HandPlan(
        full_kv=np.tile(np.arange(num_kv, dtype=np.int32), (num_q, 1)),
        full_count=np.full(num_q, num_kv, np.int32),
        partial_kv=np.zeros((num_q, 1), np.int32),
        partial_count=np.zeros(num_q, np.int32),
        mask=PaddingMask(tokens),
        tokens=tokens,
        block_sizes=(block_q, block_kv),
    )


def test_ragged_last_tiles_listed_full_are_masked_and_read_no_padding():
    """The operands are not padded: the last query tile (rows 192..255 of 200) and key tile
    (128..255) run past the end, and are masked even when a hand plan lists them full."""
    plan = _hand_dense_plan(200, 64, 128, num_q=4, num_kv=2)
    q, k, v = _qkv(3, 2, 200, 2, 64, jnp.float32)
    out = pallas_blocksparse_attention(q, k, v, plan, variant="b0", interpret=True)
    _check(out, q, k, v, None)


@pytest.mark.parametrize(
    ("num_q", "num_kv", "refusal"), [(5, 2, "5 query tiles"), (4, 3, "key tile 2")]
)
def test_a_tile_wholly_past_the_end_is_refused(num_q, num_kv, refusal):
    """With unpadded operands a tile past the last token would read and write out of bounds."""
    plan = _hand_dense_plan(200, 64, 128, num_q=num_q, num_kv=num_kv)
    q, k, v = _qkv(3, 2, 200, 2, 64, jnp.float32)
    with pytest.raises(ValueError, match=refusal):
        pallas_blocksparse_attention(q, k, v, plan, variant="b0", interpret=True)


def test_visit_slots_merges_sorts_pads_and_flags():
    slots = build_visit_slots(
        full_kv=np.array([[2, 2], [0, 1], [0, 0]], np.int32),
        full_count=np.array([1, 2, 0], np.int32),
        partial_kv=np.array([[0, 3], [3, 3], [0, 0]], np.int32),
        partial_count=np.array([2, 1, 0], np.int32),
        variant="b2",
        tokens=500,  # key tile 3 (384..511) holds padding
        block_kv=128,
    )
    assert slots.slots == 3
    assert slots.num_kv_tiles == 4
    np.testing.assert_array_equal(slots.count, [3, 3, 0])
    np.testing.assert_array_equal(slots.kv_index.reshape(3, 3), [[0, 2, 3], [0, 1, 3], [0, 0, 0]])
    np.testing.assert_array_equal(slots.masked.reshape(3, 3), [[1, 0, 1], [0, 0, 1], [0, 0, 0]])
    assert (slots.visited, slots.masked_visits) == (6, 3)


def test_visit_slots_b1_masks_every_visit_and_pads_with_last_tile():
    slots = build_visit_slots(
        full_kv=np.array([[1, 2], [0, 0]], np.int32),
        full_count=np.array([2, 1], np.int32),
        partial_kv=np.array([[0], [0]], np.int32),
        partial_count=np.array([0, 0], np.int32),
        variant="b1",
        tokens=384,
        block_kv=128,
    )
    np.testing.assert_array_equal(slots.kv_index.reshape(2, 2), [[1, 2], [0, 0]])
    np.testing.assert_array_equal(slots.masked.reshape(2, 2), [[1, 1], [1, 1]])


def test_visit_slots_rejects_duplicate_tiles():
    with pytest.raises(ValueError, match="twice"):
        build_visit_slots(
            np.array([[1]], np.int32),
            np.array([1], np.int32),
            np.array([[1]], np.int32),
            np.array([1], np.int32),
            variant="b2",
            tokens=256,
            block_kv=128,
        )


def test_packed_codes_round_trip_both_layouts():
    slots = build_visit_slots(
        full_kv=np.array([[2, 2], [0, 1], [0, 0]], np.int32),
        full_count=np.array([1, 2, 0], np.int32),
        partial_kv=np.array([[0, 3], [3, 3], [0, 0]], np.int32),
        partial_count=np.array([2, 1, 0], np.int32),
        variant="b2",
        tokens=500,
        block_kv=128,
    )
    codes = slots.codes()
    np.testing.assert_array_equal(codes, slots.kv_index * 2 + slots.masked)
    assert codes.size == 9  # odd: the last word's high half is padding
    assert slots.codes_per_word() == 2
    words = slots.packed()
    assert words.dtype == np.int32 and words.size == 5
    np.testing.assert_array_equal(unpack_codes(words, 2, codes.size), codes)
    assert words[0] == codes[0] | (codes[1] << 16)
    # A threshold at or below the largest code (7) keeps one code per word.
    assert slots.codes_per_word(limit=8) == 2 and slots.codes_per_word(limit=7) == 1
    np.testing.assert_array_equal(slots.packed(limit=7), codes)
    np.testing.assert_array_equal(unpack_codes(slots.packed(limit=0), 1, codes.size), codes)
    with pytest.raises(ValueError, match="int16"):
        slots.packed(limit=CODE_PACK_LIMIT + 1)


def test_packing_round_trips_at_the_int16_edge():
    """Codes up to 2**15 - 1 pack (the high half of a word uses bit 30 at most); one more does not."""
    num_kv = CODE_PACK_LIMIT // 2  # largest code: (num_kv - 1) * 2 + 1 = 2**15 - 1
    kv = np.array([[num_kv - 1, 0], [3, num_kv - 2], [5, 6]], np.int32)
    kwargs = {"variant": "b1", "tokens": num_kv * 128, "block_kv": 128}
    slots = build_visit_slots(
        kv, np.array([2, 2, 2]), np.zeros((3, 1), np.int32), [0, 0, 0], **kwargs
    )
    codes = slots.codes()
    assert codes.max() == CODE_PACK_LIMIT - 1 and slots.codes_per_word() == 2
    assert slots.packed().min() >= 0
    np.testing.assert_array_equal(unpack_codes(slots.packed(), 2, codes.size), codes)
    kwargs["tokens"] += 128
    kv[0, 1] = num_kv
    slots = build_visit_slots(
        kv, np.array([2, 2, 2]), np.zeros((3, 1), np.int32), [0, 0, 0], **kwargs
    )
    assert slots.codes_per_word() == 1
    np.testing.assert_array_equal(slots.packed(), slots.codes())


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_one_code_per_word_matches_reference(variant):
    """The unpacked layout (forced by ``code_pack_limit=0``); CASES above run the packed one."""
    tokens = 520  # 9 query tiles of 64: an odd number of codes
    mask = BandMask(tokens, 150, 64)
    plan = build_plan(mask, BlockSizes(64, 128), variant, rounding_tolerance=None)
    visits = plan_visit_slots(plan, variant)
    assert visits.codes_per_word() == 2 and visits.codes_per_word(limit=0) == 1
    q, k, v = _qkv(6, 1, tokens, 1, 64, jnp.float32)
    out = pallas_blocksparse_attention(
        q, k, v, plan, variant=variant, interpret=True, code_pack_limit=0
    )
    _check(out, q, k, v, plan.logical_mask)


def _small_plan(block_sizes: BlockSizes | None = None, tokens: int = 256, variant: str = "b2"):
    return build_plan(BandMask(tokens, 64, 0), block_sizes or BlockSizes(64, 128), variant)


@pytest.mark.parametrize(
    "kwargs, plan_kwargs, shape, dtype, match",
    [
        ({"variant": "b4"}, {}, (1, 256, 2, 64), jnp.float32, "variant"),
        ({"variant": "b3"}, {}, (1, 256, 2, 64), jnp.float32, "built for variant 'b2'"),
        ({"variant": "b2"}, {}, (1, 256, 2, 32), jnp.float32, "head_dim 32"),
        ({"variant": "b2"}, {}, (1, 256, 2, 64), jnp.float16, "float16"),
        ({"variant": "b2"}, {}, (1, 250, 2, 64), jnp.float32, "256 tokens"),
        (
            {"variant": "b2"},
            {"block_sizes": BlockSizes(60, 128)},
            (1, 256, 2, 64),
            jnp.float32,
            "block_q 60",
        ),
        (
            {"variant": "b2"},
            {"block_sizes": BlockSizes(64, 96)},
            (1, 256, 2, 64),
            jnp.float32,
            "block_kv 96",
        ),
        (
            {"variant": "b2", "block_kv_compute": 96},
            {},
            (1, 256, 2, 64),
            jnp.float32,
            "block_kv_compute 96",
        ),
    ],
)
def test_rejects_bad_input(kwargs, plan_kwargs, shape, dtype, match):
    plan = _small_plan(**plan_kwargs)
    x = jnp.zeros(shape, dtype)
    with pytest.raises(ValueError, match=match):
        pallas_blocksparse_attention(x, x, x, plan, interpret=True, **kwargs)


def test_compiling_off_tpu_asks_for_interpret():
    plan = _small_plan()
    x = jnp.zeros((1, 256, 1, 64), jnp.float32)
    if jax.default_backend() == "tpu":
        pytest.skip("on a TPU the kernel compiles")
    with pytest.raises(ValueError, match="interpret=True"):
        pallas_blocksparse_attention(x, x, x, plan, variant="b2", interpret=False)


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    tokens=st.integers(130, 520),
    block_q=st.sampled_from([32, 64, 128]),
    block_kv=st.sampled_from([128, 256]),
    width_fraction=st.floats(0.0, 1.0),
    sink_fraction=st.floats(0.0, 0.3),
    variant=st.sampled_from(["b1", "b2", "b3"]),
    head_dim=st.sampled_from([64, 128]),
    heads=st.integers(1, 2),
)
def test_random_shapes_blocks_and_density(
    tokens, block_q, block_kv, width_fraction, sink_fraction, variant, head_dim, heads
):
    mask = BandMask(tokens, int(width_fraction * tokens / 2), int(sink_fraction * tokens))
    plan = build_plan(mask, BlockSizes(block_q, block_kv), variant, rounding_tolerance=None)
    q, k, v = _qkv(tokens, 1, tokens, heads, head_dim, jnp.float32)
    out = pallas_blocksparse_attention(q, k, v, plan, variant=variant, interpret=True)
    _check(out, q, k, v, plan.logical_mask)


@pytest.mark.parametrize("in_place", [None, True, False])
def test_operands_in_place_or_heads_leading_give_the_same_attention(in_place):
    """Both operand layouts (``kernels.executors.pallas_tpu_operands``), asked for through the
    dispatch's options, agree with the oracle; heads-leading and in place agree bit for bit."""
    from kernels.executors.dispatch import KernelOptions, attention

    tokens = 320  # not a multiple of the tiles: both layouts pad
    mask = BandMask(tokens, 90, 32)
    q, k, v = _qkv(5, 2, tokens, 3, 128, jnp.float32)

    def run(place):
        options = KernelOptions(interpret=True, in_place=place)
        sizes = BlockSizes(128, 128)
        return attention(
            q, k, v, mask, executor="b2", block_sizes=sizes, backend="pallas_tpu", options=options
        )

    out = run(in_place)
    _check(out, q, k, v, mask)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(run(not in_place)))


def test_executor_dispatch_runs_the_kernel():
    """``kernels.executors.dispatch.attention(backend="pallas_tpu")`` reaches this kernel, under jit."""
    from kernels.executors.dispatch import KernelOptions, attention

    tokens = 256
    mask = BandMask(tokens, 100, 32)
    q, k, v = _qkv(4, 1, tokens, 2, 128, jnp.float32)
    run = jax.jit(
        lambda q, k, v: attention(
            q,
            k,
            v,
            mask,
            executor="b2",
            block_sizes=BlockSizes(128, 128),
            backend="pallas_tpu",
            options=KernelOptions(interpret=True),
        )
    )
    _check(run(q, k, v), q, k, v, mask)


@pytest.mark.tpu
@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_compiled_on_tpu(variant, dtype):
    """The same checks with Mosaic compilation (run with JAX_PLATFORMS=tpu on a TPU host)."""
    if jax.default_backend() != "tpu":
        pytest.skip("needs a TPU backend")
    tokens = 2000  # not a multiple of either tile: the last query and key tiles are ragged
    mask = BandMask(tokens, 400, 256)
    plan = build_plan(mask, BlockSizes(256, 512), variant, rounding_tolerance=None)
    q, k, v = _qkv(5, 2, tokens, 4, 128, dtype)
    out = pallas_blocksparse_attention(q, k, v, plan, variant=variant, interpret=False)
    _check(out, q, k, v, plan.logical_mask)
