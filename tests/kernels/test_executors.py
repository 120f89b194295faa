"""Every executor against the dense reference, plus the dispatch's errors."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.executors.dispatch import attention
from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import visit_groups
from kernels.masks.band import band_for_density, strided_temporal_mask
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import from_head_layouts, to_head_layouts
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from tests.helpers.geometry import preset_tokens
from tests.helpers.numerics import assert_allclose

TOLERANCE = {jnp.float32: {"atol": 1e-5}, jnp.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def _qkv(shape, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)


@st.composite
def _cases(draw):
    geometry = TokenGeometry(
        draw(st.integers(2, 3)), draw(st.integers(1, 3)), draw(st.integers(2, 6))
    )
    limit = -(-geometry.tokens // 8) * 8
    sizes = [b for b in (8, 16, 24, 40, 64) if b <= limit]
    return {
        "geometry": geometry,
        "block_sizes": BlockSizes(draw(st.sampled_from(sizes)), draw(st.sampled_from(sizes))),
        "density": draw(st.sampled_from([0.15, 0.3, 0.5, 0.8, 1.0])),
        "layout": draw(st.sampled_from(["spatial", "temporal", "strided"])),
        "variant": draw(st.sampled_from(["b0", "b1", "b2", "b3"])),
        "dtype": draw(st.sampled_from([jnp.float32, jnp.bfloat16])),
        "head_dim": draw(st.sampled_from([64, 128])),
        "batch": draw(st.integers(1, 2)),
        "heads": draw(st.integers(1, 2)),
        "seed": draw(st.integers(0, 3)),
    }


def _check_against_reference(case):
    geometry, variant = case["geometry"], case["variant"]
    shape = (case["batch"], geometry.tokens, case["heads"], case["head_dim"])
    q, k, v = _qkv(shape, case["dtype"], case["seed"])
    if case["layout"] == "strided":
        mask = strided_temporal_mask(geometry, case["density"])
    else:
        mask = band_for_density(geometry, case["density"])
    flags = jnp.asarray(np.arange(case["heads"]) % 2 == 0) & (case["layout"] == "temporal")
    q, k, v = (to_head_layouts(x, geometry, flags) for x in (q, k, v))
    plan = build_plan(mask, case["block_sizes"], variant, None)
    out = attention(q, k, v, plan, executor=variant)
    expected = reference_attention(q, k, v, None if variant == "b0" else plan.logical_mask)
    assert out.dtype == q.dtype
    assert_allclose(
        from_head_layouts(out, geometry, flags),
        from_head_layouts(expected, geometry, flags),
        **TOLERANCE[case["dtype"]],
        err_msg=str(case),
    )


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(_cases())
def test_xla_executors_match_reference(case):
    _check_against_reference(case)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(_cases())
def test_xla_executors_match_reference_many(case):
    _check_against_reference(case)


def test_permuted_band_equals_strided_mask_in_place():
    # Independent oracle for the layouts: temporal heads through permute -> band -> un-permute
    # must equal the strided temporal mask applied in frame-major order.
    geometry = TokenGeometry(4, 2, 3)
    q, k, v = _qkv((1, geometry.tokens, 2, 64), jnp.float32, 1)
    flags = jnp.array([True, False])
    band = band_for_density(geometry, 0.3)
    moved = [to_head_layouts(x, geometry, flags) for x in (q, k, v)]
    out = from_head_layouts(
        attention(*moved, band, executor="b2", block_sizes=BlockSizes(8, 16)), geometry, flags
    )
    strided = reference_attention(q, k, v, strided_temporal_mask(geometry, 0.3))
    spatial = reference_attention(q, k, v, band)
    assert_allclose(out[:, :, 0], strided[:, :, 0], atol=1e-5)
    assert_allclose(out[:, :, 1], spatial[:, :, 1], atol=1e-5)


def test_dense_peers_agree_and_jit_inside_model_call():
    q, k, v = _qkv((2, 40, 2, 64), jnp.float32, 2)
    expected = reference_attention(q, k, v)
    assert_allclose(attention(q, k, v, executor="dot_product_attention"), expected, atol=1e-5)
    fn = jax.jit(lambda q, k, v: attention(q, k, v, executor="b0", block_sizes=BlockSizes(16, 8)))
    assert_allclose(fn(q, k, v), expected, atol=1e-5)


def test_visit_groups_remove_padding_work():
    mask = band_for_density(TokenGeometry(8, 8, 8), 0.3)
    plan = build_plan(mask, BlockSizes(32, 32), "b3")
    grouped, single = visit_groups(plan, 8), visit_groups(plan, 1)
    assert grouped.wasted_fraction < single.wasted_fraction
    assert grouped.executed_visits <= single.executed_visits
    assert sorted(np.concatenate([g.q_tiles for g in grouped.groups])) == list(
        range(plan.num_q_tiles)
    )


def test_memory_stays_linear_in_tokens():
    # Compile-only check at 32K tokens: no N x N buffer (which alone would be 8 GiB here).
    geometry = preset_tokens("480p")
    shape = jax.ShapeDtypeStruct((1, geometry.tokens, 2, 128), jnp.float32)
    plan = build_plan(band_for_density(geometry, 0.39), BlockSizes(512, 512), "b2")
    compiled = (
        jax.jit(lambda q, k, v: attention(q, k, v, plan, executor=None))
        .lower(shape, shape, shape)
        .compile()
    )
    analysis = compiled.memory_analysis()
    assert analysis.temp_size_in_bytes < 2**30


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": jnp.float16}, "supported: float32, bfloat16"),
        ({"head_dim": 12}, "head_dim=12"),
        ({"tokens": 30}, "covers 32 tokens but q has 30"),
        ({"block_sizes": BlockSizes(12, 8)}, "multiple of 8"),
        ({"executor": "b5"}, "executor='b5'"),
        ({"backend": "cuda"}, "backend='cuda'"),
        ({"executor": "dot_product_attention"}, "dense peer"),
    ],
)
def test_bad_input_errors(kwargs, message):
    geometry = TokenGeometry(2, 4, 4)
    shape = (1, kwargs.pop("tokens", geometry.tokens), 1, kwargs.pop("head_dim", 64))
    q, k, v = _qkv(shape, kwargs.pop("dtype", jnp.float32))
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, band_for_density(geometry, 0.5), **kwargs)


def test_plan_variant_mismatch():
    geometry = TokenGeometry(2, 4, 4)
    q, k, v = _qkv((1, geometry.tokens, 1, 64), jnp.float32)
    plan = build_plan(band_for_density(geometry, 0.5), BlockSizes(8, 8), "b2")
    with pytest.raises(ValueError, match="TilePlan is for 'b2'"):
        attention(q, k, v, plan, executor="b1")


def test_missing_pallas_backend_is_a_clear_error(monkeypatch):
    import kernels.executors

    monkeypatch.setitem(
        sys.modules, "kernels.executors.pallas_tpu", None
    )  # import now raises ImportError
    monkeypatch.delattr(
        kernels.executors, "pallas_tpu", raising=False
    )  # an earlier import left it bound
    geometry = TokenGeometry(2, 8, 8)
    q, k, v = _qkv((1, geometry.tokens, 1, 64), jnp.float32)
    with pytest.raises(ValueError, match="backend='xla'"):
        attention(
            q, k, v, None, executor="b0", block_sizes=BlockSizes(128, 128), backend="pallas_tpu"
        )


@pytest.mark.parametrize("variant", ["b1", "b2", "b3"])
def test_single_group_with_padded_visit_lists(variant):
    # One group forces padded list entries, which must leave the softmax state untouched.
    from kernels.executors.xla_blocksparse import blocksparse_attention

    geometry = TokenGeometry(4, 3, 5)  # 60 tokens
    plan = build_plan(band_for_density(geometry, 0.3), BlockSizes(8, 8), variant, None)
    assert visit_groups(plan, 1).wasted_fraction > 0
    q, k, v = _qkv((1, geometry.tokens, 2, 64), jnp.float32, 3)
    out = jax.jit(lambda q, k, v: blocksparse_attention(q, k, v, plan, max_groups=1))(q, k, v)
    assert_allclose(out, reference_attention(q, k, v, plan.logical_mask), atol=1e-5)


def test_a_kernel_is_planned_once_and_runs_only_its_length(monkeypatch):
    # make_attention builds the tile plan when it is made; calls only run it.
    from kernels.executors import dispatch

    geometry = TokenGeometry(3, 4, 4)
    mask = band_for_density(geometry, 0.5)
    plans = []
    real_build = dispatch.build_plan
    monkeypatch.setattr(dispatch, "build_plan", lambda *a: plans.append(a) or real_build(*a))
    kernel = dispatch.make_attention(
        geometry.tokens, mask, executor="b2", block_sizes=BlockSizes(16, 16)
    )
    q, k, v = _qkv((2, geometry.tokens, 2, 64), jnp.float32)
    first, second = kernel(q, k, v), kernel(q, k, v)
    assert len(plans) == 1
    expected = reference_attention(q, k, v, mask)
    assert_allclose(first, expected, **TOLERANCE[jnp.float32])
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    short = _qkv((2, geometry.tokens - 8, 2, 64), jnp.float32)
    with pytest.raises(ValueError, match=f"built for {geometry.tokens}"):
        kernel(*short)
