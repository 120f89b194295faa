"""TPU v6e SMEM/VMEM budget of the Pallas kernel: plain arithmetic, nothing traced or allocated."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kernels.executors.pallas_tpu_budget import (
    DEFAULT_SCOPED_VMEM_BYTES,
    SMALLEST_DEFAULT_SCOPED_VMEM_BYTES,
    SMEM_BYTES,
    SMEM_LIMIT_BYTES,
    VMEM_AUTO_CAP_BYTES,
    VMEM_PHYSICAL_BYTES,
    MiB,
    auto_vmem_limit_bytes,
    check_tpu_budget,
    dense_table_smem_bytes,
    kernel_vmem_bytes,
    require_tpu_budget,
    resolve_block_kv_compute,
    visit_table_smem_bytes,
)
from kernels.executors.pallas_tpu_visits import plan_visit_slots
from kernels.masks.band import PaddingMask, band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.plans.tiles import build_plan

GEOMETRY_720P = TokenGeometry(21, 45, 80)  # 75,600 tokens
GEOMETRY_1080P = TokenGeometry(21, 68, 120)  # 171,360 tokens
HEAD_DIM = 128


def _dense_plan(tokens: int, block: int):
    return build_plan(PaddingMask(tokens), BlockSizes(block, block), "b0")


def test_128_tiles_overflow_smem_unpacked_at_720p_and_even_packed_at_1080p():
    plan = _dense_plan(GEOMETRY_720P.tokens, 128)
    visits = plan_visit_slots(plan, "b0")
    assert (visits.num_q_tiles, visits.slots) == (591, 591)
    # One int32 word per code would need 1.3 MiB, over the whole of SMEM ...
    assert visits.smem_bytes(limit=0) > SMEM_BYTES
    # ... two int16 codes per word bring it under the limit at 720p.
    assert visit_table_smem_bytes(plan, "b0") <= SMEM_LIMIT_BYTES
    assert check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16").fits

    plan = _dense_plan(GEOMETRY_1080P.tokens, 128)
    budget = check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16")
    assert budget.smem_bytes > SMEM_BYTES and not budget.fits
    with pytest.raises(ValueError, match="exceeds SMEM") as raised:
        budget.require()
    message = str(raised.value)
    assert "at 128x128 tiles" in message and "3.4 MiB" in message
    block_q, block_kv = map(int, re.search(r"block_q=(\d+) block_kv=(\d+) fits", message).groups())
    # The suggested tiles do fit, and so do the seed's, named alongside.
    assert dense_table_smem_bytes(GEOMETRY_1080P.tokens, block_q, block_kv) <= SMEM_LIMIT_BYTES
    assert "seed's 3328x1536" in message


@pytest.mark.parametrize("geometry", [GEOMETRY_720P, GEOMETRY_1080P])
@pytest.mark.parametrize("variant", ["b0", "b3"])
def test_seed_tiles_fit(geometry, variant):
    tiles = auto_block_sizes(geometry.tokens, "pallas_tpu")
    plan = build_plan(band_for_density(geometry, 0.3887), tiles, variant)
    budget = require_tpu_budget(plan, variant, HEAD_DIM, "bfloat16")
    assert budget.smem_bytes < 16 * 1024  # tens of visits per query tile, not thousands
    assert DEFAULT_SCOPED_VMEM_BYTES < budget.vmem_bytes <= budget.vmem_limit
    assert budget.compiler_vmem_limit == budget.vmem_limit <= VMEM_AUTO_CAP_BYTES


def test_int16_packing_halves_the_code_table():
    visits = plan_visit_slots(_dense_plan(GEOMETRY_720P.tokens, 256), "b0")
    codes = visits.codes()
    assert visits.codes_per_word() == 2 and visits.codes_per_word(limit=0) == 1
    assert visits.packed().size == (codes.size + 1) // 2
    assert visits.packed(limit=0).size == codes.size
    counts = visits.count.nbytes
    assert visits.smem_bytes() - counts == 4 * ((codes.size + 1) // 2)
    assert visits.smem_bytes(limit=0) - counts == 4 * codes.size
    # The dense-table arithmetic the suggestions use agrees with the table the kernel builds.
    assert dense_table_smem_bytes(GEOMETRY_720P.tokens, 256, 256) == visits.smem_bytes()


def test_vmem_estimate_is_monotone_in_tiles_and_chunk():
    sizes = [128, 256, 512, 1024, 2048, 3328]
    for dtype in ("bfloat16", np.float32):
        by_q = [kernel_vmem_bytes(q, 1536, HEAD_DIM, dtype) for q in sizes]
        by_kv = [kernel_vmem_bytes(3328, kv, HEAD_DIM, dtype) for kv in (512, 1024, 1536, 2048)]
        by_chunk = [kernel_vmem_bytes(3328, 1536, HEAD_DIM, dtype, c) for c in (128, 256, 512)]
        for series in (by_q, by_kv, by_chunk):
            assert all(a < b for a, b in zip(series, series[1:], strict=False))
    assert kernel_vmem_bytes(512, 512, 128, "bfloat16") < kernel_vmem_bytes(
        512, 512, 128, "float32"
    )
    assert resolve_block_kv_compute(1536, None) == 512  # the kernel's default chunk


def test_seed_tile_vmem_numbers():
    # q, o [3328, 128] and k, v [1536, 128] bf16, double-buffered: 4,980,736 bytes; float32
    # m, l, acc scratch and the same again of row temporaries: 2 x 5,111,808; three float32
    # score arrays plus p in bf16 over [3328, 512]: 23,855,104.
    vmem = kernel_vmem_bytes(3328, 1536, HEAD_DIM, "bfloat16")
    assert vmem == 4_980_736 + 2 * 5_111_808 + 23_855_104
    assert auto_vmem_limit_bytes(vmem) == 47 * MiB  # 37.25 MiB x 1.25, rounded up to a MiB
    assert auto_vmem_limit_bytes(SMALLEST_DEFAULT_SCOPED_VMEM_BYTES) is None
    # Above v5e's 16 MiB default the limit is asked for, and never below v6e's 32 MiB default:
    # 2688 x 1536 b2 tiles, estimated within 32 MiB, needed 20.71 MiB on a v5e.
    assert (
        auto_vmem_limit_bytes(SMALLEST_DEFAULT_SCOPED_VMEM_BYTES + 1) == DEFAULT_SCOPED_VMEM_BYTES
    )
    assert auto_vmem_limit_bytes(30 * MiB) == 38 * MiB
    assert auto_vmem_limit_bytes(VMEM_PHYSICAL_BYTES) == VMEM_AUTO_CAP_BYTES


def test_absurd_tiles_are_refused_with_a_limit_or_chunk_that_fits():
    plan = build_plan(PaddingMask(GEOMETRY_720P.tokens), BlockSizes(16384, 4096), "b0")
    budget = check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16")
    assert not budget.fits and budget.vmem_bytes > VMEM_AUTO_CAP_BYTES
    (problem,) = budget.problems
    chunk = int(re.search(r"kernel.block_kv_compute=(\d+)", problem).group(1))
    assert kernel_vmem_bytes(16384, 4096, HEAD_DIM, "bfloat16", chunk) <= VMEM_AUTO_CAP_BYTES
    assert check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16", block_kv_compute=chunk).fits

    # An explicit limit below the estimate: the message offers a limit that fits, or a chunk.
    tiles = auto_block_sizes(GEOMETRY_720P.tokens, "pallas_tpu")
    plan = build_plan(PaddingMask(GEOMETRY_720P.tokens), tiles, "b0")
    budget = check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16", vmem_limit_bytes=32 * MiB)
    (problem,) = budget.problems
    assert problem.startswith("VMEM 37.2 MiB > scoped limit 32.0 MiB at 3328x1536 tiles")
    limit = int(re.search(r"kernel.vmem_limit_bytes=(\d+)", problem).group(1))
    chunk = int(re.search(r"kernel.block_kv_compute=(\d+)", problem).group(1))
    assert check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16", None, limit).fits
    assert check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16", chunk, 32 * MiB).fits

    budget = check_tpu_budget(plan, "b0", HEAD_DIM, "bfloat16", vmem_limit_bytes=256 * MiB)
    assert not budget.fits and "128.0 MiB of VMEM" in budget.problems[0]


def test_auto_block_sizes_rule():
    assert auto_block_sizes(75_600, "pallas_tpu") == BlockSizes(3328, 1536)
    assert auto_block_sizes(2_000, "pallas_tpu") == BlockSizes(2048, 1536)
    assert auto_block_sizes(1_000, "pallas_tpu") == BlockSizes(1024, 1024)
    assert auto_block_sizes(75_600, "xla") == BlockSizes(128, 128)
    assert auto_block_sizes(100, "xla") == BlockSizes(104, 104)
    for tokens in (1, 100, 1_000, 2_160, 75_600):
        for backend in ("pallas_tpu", "pallas_gpu", "xla", "reference"):
            auto_block_sizes(tokens, backend).validate(tokens, backend)
        # The reference computes the mask densely; its tiles only shape it, on XLA's granularity.
        assert auto_block_sizes(tokens, "reference") == auto_block_sizes(tokens, "xla")
    with pytest.raises(ValueError, match="multiple of 8 as backend 'xla'"):
        BlockSizes(100, 100).validate(1_000, "reference")
    with pytest.raises(ValueError, match=r"\['pallas_gpu', 'pallas_tpu', 'xla'\]"):
        auto_block_sizes(1_000, "metal")
    with pytest.raises(ValueError, match="positive"):
        auto_block_sizes(0, "xla")


# Mosaic's scoped VMEM need at the default chunk, bisected on libtpu 0.0.42.1 for v6e (bf16,
# head_dim 128): the figures the model is held to (kernels/executors/pallas_tpu_budget.py).
MOSAIC_MEASURED_MIB = {
    (512, 512): 2.00,
    (512, 1024): 2.75,
    (1024, 512): 4.25,
    (1024, 1024): 4.50,
    (2048, 1024): 9.00,
    (1024, 2048): 8.25,
    (2048, 2048): 15.25,
    (3328, 1536): 18.75,
    (4096, 2048): 29.25,
    (2048, 4096): 27.75,
    (4096, 4096): 53.75,
}


@pytest.mark.parametrize(("tiles", "measured"), MOSAIC_MEASURED_MIB.items())
def test_the_vmem_model_never_promises_less_than_mosaic_needs(tiles, measured):
    modelled = kernel_vmem_bytes(*tiles, HEAD_DIM, "bfloat16") / MiB
    assert measured <= modelled <= 3.1 * measured, (tiles, modelled)
