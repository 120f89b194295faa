"""Launch parameters and the shared-memory budget of the Pallas GPU (Triton) kernel.

Triton stages each operand of a tensor-core dot through shared memory. The block-sparse kernel
(``kernels.executors.pallas_gpu``) keeps its query tile resident for the whole program and streams
K and V tiles through a software pipeline of ``num_stages`` buffers, so one program needs about

    itemsize * (block_q * head_dim + num_stages * 2 * block_kv * head_dim)

bytes of shared memory; the online-softmax state (running max and sum [block_q], accumulator
[block_q, head_dim], all float32) lives in registers. A launch whose blocks need more than a
streaming multiprocessor offers fails on the device with Triton's "out of resource: shared
memory"; this module refuses it earlier, from any machine, and names tiles that fit. The model is
an estimate: Triton may add a conversion buffer or reuse one, which is why the limit keeps a
margin (``SHARED_MEMORY_MARGIN``).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike

# Opt-in shared memory per thread block on Hopper (H100 / H200): 227 KiB.
H200_SHARED_MEMORY_BYTES = 227 * 1024
# Fraction of the limit the estimate may use (room for Triton's own buffers).
SHARED_MEMORY_MARGIN = 0.9
# Two K/V buffers: one tile loads while the previous one is computed on.
DEFAULT_NUM_STAGES = 2
# Accumulator elements per program above which 8 warps (not 4) hold it: 128 x 128 float32 in
# 8 warps is 64 registers a thread, what FlashAttention-2's Triton forward uses.
_EIGHT_WARPS_FROM = 128 * 128


def _dtype(dtype: DTypeLike) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def _itemsize(dtype: DTypeLike) -> int:
    return int(_dtype(dtype).itemsize)


def default_num_warps(block_q: int, head_dim: int) -> int:
    """Warps per program: 8 when the float32 accumulator has 128 x 128 elements or more, else 4.

    Args:
        block_q: query rows per tile.
        head_dim: head dimension.
    """
    return 8 if block_q * head_dim >= _EIGHT_WARPS_FROM else 4


def shared_memory_bytes(
    block_q: int, block_kv: int, head_dim: int, dtype: DTypeLike, num_stages: int
) -> int:
    """Estimated shared memory of one program (see the module docstring).

    Args:
        block_q: query rows per tile.
        block_kv: key rows per tile.
        head_dim: head dimension.
        dtype: q/k/v dtype (float32 or bfloat16).
        num_stages: K/V pipeline buffers.

    Returns:
        Bytes.
    """
    return _itemsize(dtype) * head_dim * (block_q + num_stages * 2 * block_kv)


def check_gpu_tiles(
    block_q: int,
    block_kv: int,
    head_dim: int,
    dtype: DTypeLike,
    num_stages: int | None = None,
    limit_bytes: int = H200_SHARED_MEMORY_BYTES,
) -> None:
    """Raises ValueError when one program's blocks would not fit the GPU's shared memory.

    Args:
        block_q: query rows per tile.
        block_kv: key rows per tile.
        head_dim: head dimension.
        dtype: q/k/v dtype.
        num_stages: K/V pipeline buffers (None: ``DEFAULT_NUM_STAGES``).
        limit_bytes: shared memory per thread block (default: H200).

    Raises:
        ValueError: naming the estimate, the limit and tiles (or a stage count) that fit.
    """
    stages = DEFAULT_NUM_STAGES if num_stages is None else num_stages
    if stages < 1:
        raise ValueError(f"num_stages={stages}; need at least 1")
    need = shared_memory_bytes(block_q, block_kv, head_dim, dtype, stages)
    usable = int(limit_bytes * SHARED_MEMORY_MARGIN)
    if need <= usable:
        return
    advice = []
    if stages > 1 and shared_memory_bytes(block_q, block_kv, head_dim, dtype, stages - 1) <= usable:
        advice.append(f"kernel.num_stages={stages - 1}")
    kv = block_kv
    while kv > 16 and shared_memory_bytes(block_q, kv, head_dim, dtype, stages) > usable:
        kv //= 2
    if shared_memory_bytes(block_q, kv, head_dim, dtype, stages) <= usable:
        advice.append(f"kernel.block_kv={kv}")
    q = block_q
    while q > 16 and shared_memory_bytes(q, block_kv, head_dim, dtype, stages) > usable:
        q //= 2
    if shared_memory_bytes(q, block_kv, head_dim, dtype, stages) <= usable:
        advice.append(f"kernel.block_q={q}")
    hint = " or ".join(advice) if advice else "smaller tiles (e.g. kernel=pallas_gpu: 128 x 64)"
    raise ValueError(
        f"Pallas GPU tiles {block_q} x {block_kv} (head_dim {head_dim}, {_dtype(dtype).name}, "
        f"{stages} stages) need ~{math.ceil(need / 1024)} KiB of shared memory per program, over "
        f"the {math.floor(usable / 1024)} KiB usable of {limit_bytes // 1024} KiB; use {hint}"
    )
