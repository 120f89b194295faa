"""The Pallas GPU kernel lowers to Triton for platform "cuda" on this (CPU) machine, at real sizes.

``jax.export`` runs the Pallas-to-Triton lowering without a GPU (Triton's own compile to PTX happens
on the device). The Triton call is a custom call that export does not promise to keep stable, so
the kernel module exports ``CUDA_EXPORT_DISABLED_CHECKS`` for this use.

Shapes: the seed's 720p kernel geometry (75,600 tokens, 10 heads x 128, density 0.3887, bf16) for
every variant, and Wan 2.1 14B on one H200 at 1440p (302,400 tokens, batch 2 for classifier-free
guidance, 40 heads) for the dense and tile-rounded variants.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jax import export

from kernels.executors.pallas_gpu import (
    CUDA_EXPORT_DISABLED_CHECKS,
    pallas_gpu_blocksparse_attention,
)
from kernels.executors.pallas_gpu_budget import check_gpu_tiles
from kernels.masks.band import PaddingMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import auto_block_sizes
from kernels.plans.tiles import build_plan

DENSITY = 0.3887
GEOMETRY_720P = TokenGeometry(21, 45, 80)
GEOMETRY_1440P = TokenGeometry(21, 90, 160)
TRITON_CALL = "__gpu$xla.gpu.triton"
# The visit codes are constants of the module, once per attention call site; a band plan's codes
# are a few columns per query tile, so a whole exported call stays far below this.
MAX_MODULE_BYTES = 1 << 20


def _export(plan, variant: str, shape: tuple[int, int, int, int]) -> export.Exported:
    spec = jax.ShapeDtypeStruct(shape, jnp.bfloat16)

    def attend(q, k, v):
        return pallas_gpu_blocksparse_attention(q, k, v, plan, variant=variant)

    return export.export(
        jax.jit(attend), platforms=["cuda"], disabled_checks=CUDA_EXPORT_DISABLED_CHECKS
    )(spec, spec, spec)


def _plan(geometry: TokenGeometry, variant: str):
    tiles = auto_block_sizes(geometry.tokens, "pallas_gpu")
    mask = PaddingMask(geometry.tokens) if variant == "b0" else band_for_density(geometry, DENSITY)
    return build_plan(mask, tiles, variant)


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_lowers_for_cuda_at_the_seed_720p_geometry(variant):
    assert GEOMETRY_720P.tokens == 75_600
    plan = _plan(GEOMETRY_720P, variant)
    assert (plan.block_sizes.block_q, plan.block_sizes.block_kv) == (128, 64)
    check_gpu_tiles(128, 64, 128, jnp.bfloat16)
    exported = _export(plan, variant, (1, GEOMETRY_720P.tokens, 10, 128))
    module = exported.mlir_module()
    assert exported.platforms == ("cuda",)
    assert module.count(TRITON_CALL) == 1
    assert f"blocksparse_attention_gpu_{variant}" in module
    assert len(module.encode()) < MAX_MODULE_BYTES
    out = exported.out_avals[0]
    assert out.shape == (1, 75_600, 10, 128) and out.dtype == jnp.bfloat16


@pytest.mark.parametrize("variant", ["b0", "b3"])
def test_lowers_for_cuda_at_14b_1440p_on_one_h200(variant):
    plan = _plan(GEOMETRY_1440P, variant)
    exported = _export(plan, variant, (2, GEOMETRY_1440P.tokens, 40, 128))
    module = exported.mlir_module()
    assert module.count(TRITON_CALL) == 1
    assert len(module.encode()) < MAX_MODULE_BYTES


def test_export_without_the_disabled_check_is_refused():
    """Why the module exports CUDA_EXPORT_DISABLED_CHECKS: export rejects the Triton call."""
    plan = _plan(TokenGeometry(2, 8, 8), "b2")
    spec = jax.ShapeDtypeStruct((1, 128, 1, 64), jnp.bfloat16)

    def attend(q, k, v):
        return pallas_gpu_blocksparse_attention(q, k, v, plan, variant="b2")

    with pytest.raises(ValueError, match=re.escape(TRITON_CALL)):
        export.export(jax.jit(attend), platforms=["cuda"])(spec, spec, spec)
