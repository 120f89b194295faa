"""Shared-memory estimate and launch defaults of the Pallas GPU kernel."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from kernels.executors.pallas_gpu_budget import (
    H200_SHARED_MEMORY_BYTES,
    SHARED_MEMORY_MARGIN,
    check_gpu_tiles,
    default_num_warps,
    shared_memory_bytes,
)


def test_estimate_counts_q_once_and_k_v_per_stage():
    # bf16, head_dim 128: q 128 rows + 2 stages x (K + V) x 64 rows = 384 rows of 256 bytes.
    assert shared_memory_bytes(128, 64, 128, jnp.bfloat16, 2) == 384 * 256
    assert shared_memory_bytes(128, 64, 128, "bfloat16", 3) == (128 + 3 * 2 * 64) * 256
    assert shared_memory_bytes(64, 64, 64, jnp.float32, 2) == (64 + 4 * 64) * 64 * 4


def test_default_tiles_fit_an_h200_and_large_ones_are_refused_with_tiles_that_fit():
    check_gpu_tiles(128, 64, 128, jnp.bfloat16)  # the auto tiles, ~96 KiB
    check_gpu_tiles(128, 128, 128, jnp.bfloat16, num_stages=2)  # 640 rows x 256 B = 160 KiB
    with pytest.raises(ValueError, match=r"256 x 256 .* KiB .* kernel\.block_kv=(\d+)") as error:
        check_gpu_tiles(256, 256, 128, jnp.bfloat16, num_stages=3)
    advised = int(str(error.value).rsplit("kernel.block_kv=", 1)[1].split()[0])
    usable = H200_SHARED_MEMORY_BYTES * SHARED_MEMORY_MARGIN
    assert shared_memory_bytes(256, advised, 128, jnp.bfloat16, 3) <= usable
    assert shared_memory_bytes(256, 2 * advised, 128, jnp.bfloat16, 3) > usable


def test_fewer_stages_offered_when_they_fit_and_bad_stage_counts_refused():
    with pytest.raises(ValueError, match="224 KiB .* kernel.num_stages=2"):
        check_gpu_tiles(128, 128, 128, jnp.bfloat16, num_stages=3)
    with pytest.raises(ValueError, match="num_stages=0"):
        check_gpu_tiles(128, 64, 128, jnp.bfloat16, num_stages=0)
    with pytest.raises(ValueError, match="of 100 KiB"):
        check_gpu_tiles(128, 64, 128, jnp.bfloat16, limit_bytes=100 * 1024)


def test_default_num_warps_follows_the_accumulator_size():
    assert default_num_warps(128, 128) == 8
    assert default_num_warps(128, 64) == 4
    assert default_num_warps(64, 128) == 4
    assert default_num_warps(256, 64) == 8
