"""The Pallas TPU kernel lowers to Mosaic for platform "tpu" on this (CPU) machine, at real sizes.

``jax.export`` runs the Pallas-to-Mosaic lowering without a TPU; what it cannot run is Mosaic's own
compile in libtpu, where SMEM and VMEM are allocated, so each case also checks the v6e budget
(``kernels.executors.pallas_tpu_budget``) and that the automatic scoped VMEM limit reaches the
serialized custom call.

Shapes: Wan 2.1 14B (40 heads x 128) on 8 chips with 8-way sequence parallelism, so each chip's
attention call holds the full sequence, 40 / 8 = 5 heads, batch 2 (classifier-free guidance), bf16.
"""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax import export

from kernels.executors.pallas_tpu import pallas_blocksparse_attention
from kernels.executors.pallas_tpu_budget import check_tpu_budget
from kernels.masks.band import BandMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.plans.tiles import VARIANTS, build_plan

BATCH, HEADS_PER_CHIP, HEAD_DIM = 2, 40 // 8, 128
DENSITY = 0.3887
# Token grids of the presets in conf/resolution (21 latent frames at 81 frames; H/16 x W/16).
GEOMETRIES = {
    "720p": (TokenGeometry(21, 45, 80), 75_600),
    "1080p": (TokenGeometry(21, 68, 120), 171_360),
    "1440p": (TokenGeometry(21, 90, 160), 302_400),
}


def _export(plan, variant: str, tokens: int, **kwargs) -> export.Exported:
    spec = jax.ShapeDtypeStruct((BATCH, tokens, HEADS_PER_CHIP, HEAD_DIM), jnp.bfloat16)

    def attend(q, k, v):
        return pallas_blocksparse_attention(q, k, v, plan, variant=variant, **kwargs)

    return export.export(jax.jit(attend), platforms=["tpu"])(spec, spec, spec)


def _custom_call_configs(module: str) -> list[dict]:
    """The JSON backend configs of the module's ``tpu_custom_call`` ops (Mosaic kernels)."""
    configs = re.findall(r'custom_call @tpu_custom_call\(.*?backend_config = "(.*?)"', module)
    return [json.loads(c.replace("\\22", '"')) for c in configs]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("resolution", list(GEOMETRIES))
def test_lowers_for_tpu_within_budget(resolution, variant):
    geometry, tokens = GEOMETRIES[resolution]
    assert geometry.tokens == tokens
    block_sizes = auto_block_sizes(tokens, "pallas_tpu")
    assert block_sizes == BlockSizes(3328, 1536)
    plan = build_plan(band_for_density(geometry, DENSITY), block_sizes, variant)

    budget = check_tpu_budget(plan, variant, HEAD_DIM, jnp.bfloat16)
    assert budget.fits, budget.problems
    assert budget.smem_bytes <= budget.smem_limit
    assert budget.vmem_bytes <= budget.vmem_limit

    exported = _export(plan, variant, tokens)
    module = exported.mlir_module()
    assert exported.platforms == ("tpu",)
    assert "tpu_custom_call" in module
    (config,) = _custom_call_configs(module)
    assert config["custom_call_config"]["body"]  # the serialized Mosaic kernel
    # The seed tiles' working set exceeds the 32 MiB default, so the kernel raised the limit.
    assert budget.compiler_vmem_limit is not None
    (scoped,) = config["scoped_memory_configs"]
    assert scoped["size"] == budget.compiler_vmem_limit
    assert exported.out_avals[0].shape == (BATCH, tokens, HEADS_PER_CHIP, HEAD_DIM)


def test_explicit_vmem_limit_reaches_mosaic_and_small_tiles_keep_the_default():
    mask = BandMask(4096, 500, 100)
    plan = build_plan(mask, BlockSizes(1024, 512), "b2")
    (config,) = _custom_call_configs(
        _export(plan, "b2", 4096, vmem_limit_bytes=50 << 20).mlir_module()
    )
    assert config["scoped_memory_configs"][0]["size"] == 50 << 20
    # 1024 x 512 tiles need far less than 32 MiB: no limit is passed, the compiler default holds.
    (config,) = _custom_call_configs(_export(plan, "b2", 4096).mlir_module())
    assert "scoped_memory_configs" not in config


def test_lowering_refuses_a_visit_table_smem_cannot_hold():
    geometry, tokens = GEOMETRIES["1080p"]
    plan = build_plan(band_for_density(geometry, DENSITY), BlockSizes(128, 128), "b3")
    with pytest.raises(ValueError, match=r"exceeds SMEM.*block_q=\d+ block_kv=\d+ fits"):
        _export(plan, "b3", tokens)


@pytest.mark.parametrize(
    ("heads", "head_dim", "copies"), [(5, 128, False), (1, 64, False), (4, 64, True)]
)
def test_inputs_are_read_in_place_unless_head_dim_is_narrower_than_the_lanes(
    heads, head_dim, copies
):
    """With 128-lane heads (or one head) the kernel reads [batch, tokens, heads * head_dim] as it
    is: the exported TPU program has no transpose; head_dim 64 with several heads copies each
    input into heads-leading order and the output back (four transposes)."""
    from kernels.executors.pallas_tpu_operands import reads_in_place

    assert reads_in_place(heads, head_dim) is not copies
    tokens = 1024
    plan = build_plan(BandMask(tokens, 200, 64), BlockSizes(256, 256), "b2")
    spec = jax.ShapeDtypeStruct((BATCH, tokens, heads, head_dim), jnp.bfloat16)

    def attend(q, k, v):
        return pallas_blocksparse_attention(q, k, v, plan, variant="b2")

    module = export.export(jax.jit(attend), platforms=["tpu"])(spec, spec, spec).mlir_module()
    assert module.count("stablehlo.transpose") == (4 if copies else 0)


def test_heads_leading_operands_can_be_asked_for_and_in_place_is_refused_where_it_cannot_be():
    tokens = 1024
    plan = build_plan(BandMask(tokens, 200, 64), BlockSizes(256, 256), "b2")
    spec = jax.ShapeDtypeStruct((BATCH, tokens, 5, 128), jnp.bfloat16)

    def attend(q, k, v):
        return pallas_blocksparse_attention(q, k, v, plan, variant="b2", in_place=False)

    module = export.export(jax.jit(attend), platforms=["tpu"])(spec, spec, spec).mlir_module()
    assert module.count("stablehlo.transpose") == 4
    narrow = jax.ShapeDtypeStruct((BATCH, tokens, 4, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"in_place=True needs head_dim a multiple of 128"):
        jax.eval_shape(
            lambda q: pallas_blocksparse_attention(q, q, q, plan, variant="b2", in_place=True),
            narrow,
        )
