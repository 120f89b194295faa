"""A setting Mosaic compiles, found by Mosaic, when it refuses the run's Pallas TPU tiles for VMEM.

Mosaic's refusal ("Scoped allocation with size X and limit Y exceeded") names the one allocation
that did not fit, not the kernel's whole need. The need is found instead by asking Mosaic: the
kernel's scoped VMEM depends on the tiles, the compute chunk, head_dim and dtype, not on the
sequence length, so the kernel is compiled at a sequence of a few tiles (a second or two per
compile on a CPU core) and the limit bisected in MiB steps up to ``VMEM_AUTO_CAP_BYTES``. When
even that cap is too small, smaller tiles are tried (halving the larger tile first) at the
default limit; the visit tables at the run's real length must fit SMEM too. What is printed has
compiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.estimates import compile_for, compiler_reason
from kernels.executors.pallas_tpu_budget import (
    DEFAULT_SCOPED_VMEM_BYTES,
    NUM_LANES,
    SMEM_LIMIT_BYTES,
    VMEM_AUTO_CAP_BYTES,
    dense_table_smem_bytes,
)
from kernels.masks.band import BandMask, PaddingMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

MiB = 1 << 20
# Tile shrinking gives up below this many rows (a 128-row tile is the lane width).
_SMALLEST_TILE = NUM_LANES


def _vmem_refusal(device: Any, call: Callable[..., Any], qkv: Any) -> str | None:
    """Mosaic's VMEM refusal of ``call`` in one line, or None when it compiles."""
    try:
        compile_for(device, call, qkv, qkv, qkv)
    except Exception as error:  # noqa: BLE001 - only VMEM refusals mean "does not fit"
        if "scoped allocation" in str(error).lower() or "vmem" in str(error).lower():
            return compiler_reason(error)
        raise
    return None


def mosaic_vmem_refusal(
    device: Any,
    *,
    variant: str,
    tiles: tuple[int, int],
    head_dim: int,
    dtype: str,
    block_kv_compute: int | None,
    vmem_limit: int | None,
) -> str | None:
    """Whether Mosaic refuses the run's kernel for VMEM, in seconds: compiled at a sequence of a
    few tiles (its VMEM does not grow with N). Returns the refusal in one line, or None."""
    from kernels.executors.pallas_tpu import pallas_blocksparse_attention

    tokens = 4 * max(tiles)
    mask = PaddingMask(tokens) if variant == "b0" else BandMask(tokens, tokens // 2, 0)
    plan = build_plan(mask, BlockSizes(*tiles), variant, rounding_tolerance=None)
    qkv = jax.ShapeDtypeStruct((1, tokens, 1, head_dim), jnp.dtype(dtype))

    def call(q, k, v):
        return pallas_blocksparse_attention(
            q,
            k,
            v,
            plan,
            variant=variant,
            block_kv_compute=block_kv_compute,
            vmem_limit_bytes=vmem_limit,
            check_budget=False,
        )

    return _vmem_refusal(device, call, qkv)


def mosaic_vmem_need(compiles: Callable[[int], bool], start: int, cap: int) -> int | None:
    """The smallest limit in whole MiB above ``start`` (a limit that was refused) and up to
    ``cap`` under which ``compiles`` holds (bisection: ``compiles`` is monotone in the limit), or
    None when ``cap`` is not enough."""
    low, high = start // MiB, cap // MiB  # in MiB: low was refused, high is tried first
    if not compiles(high * MiB):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        if compiles(mid * MiB):
            high = mid
        else:
            low = mid
    return high * MiB


def fitting_setting(
    device: Any,
    *,
    variant: str,
    tiles: tuple[int, int],
    tokens: int,
    head_dim: int,
    dtype: str,
    block_kv_compute: int | None,
    vmem_limit: int | None,
) -> str:
    """A setting under which Mosaic compiles the run's kernel, checked by compiling it.

    Args:
        device: a compile-only TPU chip (``TpuCompiler.device``).
        variant: the refused kernel's variant (b0-b3).
        tiles: (block_q, block_kv) of the run.
        tokens: the run's sequence length (for the SMEM of smaller tiles' visit tables).
        head_dim: head dimension.
        dtype: compute dtype name.
        block_kv_compute: the run's compute chunk (None: the kernel's default).
        vmem_limit: the limit it was refused under (None: the automatic one).

    Returns:
        E.g. ``kernel.vmem_limit_bytes=50331648 (Mosaic compiles these tiles at 48 MiB)``, or
        smaller tiles that Mosaic compiles at the default limit, or why none was found.
    """

    def compiles(tiles: tuple[int, int], chunk: int | None, limit: int | None) -> bool:
        refusal = mosaic_vmem_refusal(
            device,
            variant=variant,
            tiles=tiles,
            head_dim=head_dim,
            dtype=dtype,
            block_kv_compute=chunk,
            vmem_limit=limit,
        )
        return refusal is None

    start = vmem_limit or DEFAULT_SCOPED_VMEM_BYTES
    need = mosaic_vmem_need(
        lambda limit: compiles(tiles, block_kv_compute, limit), start, VMEM_AUTO_CAP_BYTES
    )
    if need is not None:
        return (
            f"kernel.vmem_limit_bytes={need} compiles (Mosaic compiled these tiles at "
            f"{need // MiB} MiB)"
        )
    for smaller in _smaller_tiles(tiles):
        if dense_table_smem_bytes(tokens, *smaller) > SMEM_LIMIT_BYTES:
            continue
        if compiles(smaller, None, None):
            return (
                f"kernel.block_q={smaller[0]} kernel.block_kv={smaller[1]} compiles (Mosaic, at "
                "its default VMEM limit; SMEM fits at the run's length)"
            )
    cap = VMEM_AUTO_CAP_BYTES // MiB
    return f"no tile pair from {tiles[0]}x{tiles[1]} down compiles under {cap} MiB of VMEM"


def _smaller_tiles(tiles: tuple[int, int]) -> list[tuple[int, int]]:
    """Tile pairs from ``tiles`` down, halving the larger tile each time (lane multiples)."""
    block_q, block_kv = tiles
    found = []
    while max(block_q, block_kv) > _SMALLEST_TILE:
        if block_q >= block_kv:
            block_q = max(_SMALLEST_TILE, math.ceil(block_q / 2 / NUM_LANES) * NUM_LANES)
        else:
            block_kv = max(_SMALLEST_TILE, math.ceil(block_kv / 2 / NUM_LANES) * NUM_LANES)
        found.append((block_q, block_kv))
    return found
