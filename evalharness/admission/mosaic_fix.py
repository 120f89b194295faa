"""Mosaic's VMEM verdict on the run's Pallas TPU tiles, found in seconds, and a setting it compiles.

Mosaic's refusal ("Scoped allocation with size X and limit Y exceeded") names the one allocation
that did not fit, not the kernel's whole need. The need is found by asking Mosaic: a kernel's
scoped VMEM depends on the tiles, the compute chunk, head_dim and dtype, not on the sequence
length, so it is compiled at a sequence of a few tiles (a second or two per compile on a CPU core)
and the limit bisected in MiB steps up to ``VMEM_AUTO_CAP_BYTES``. When even that cap is too
small, smaller tiles are tried (halving the larger tile first) at the default limit; the visit
tables at the run's real length must fit SMEM too. What is printed has compiled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.config import EvalConfig
from evalharness.estimates import (
    TpuCompiler,
    compile_for,
    compiler_reason,
    scoped_vmem_shortfall,
)
from kernels.executors.pallas_tpu_budget import (
    DEFAULT_SCOPED_VMEM_BYTES,
    NUM_LANES,
    SMEM_LIMIT_BYTES,
    VMEM_AUTO_CAP_BYTES,
    TpuBudget,
    dense_table_smem_bytes,
)
from kernels.masks.band import BandMask, PaddingMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from models.config import WanTransformerConfig

MiB = 1 << 20
# Tile shrinking gives up below this many rows (a 128-row tile is the lane width).
_SMALLEST_TILE = NUM_LANES


@dataclasses.dataclass(frozen=True)
class _Kernel:
    """A Pallas TPU kernel as Mosaic compiles it: ``variant`` (b0-b3), ``tiles`` (block_q,
    block_kv), head_dim, dtype name, compute chunk and VMEM limit (None: the kernel's defaults)."""

    variant: str
    tiles: tuple[int, int]
    head_dim: int
    dtype: str
    block_kv_compute: int | None
    vmem_limit: int | None


def mosaic_refusals(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    budgets: Mapping[str, TpuBudget],
    compiler: TpuCompiler,
) -> list[str]:
    """Mosaic's VMEM refusal of each Pallas TPU kernel the run uses (``budgets``' plans) on
    ``compiler``'s chip, each with a setting Mosaic compiles (none for another backend)."""
    kernel = cfg.kernel
    if kernel.backend.value != "pallas_tpu":
        return []
    found = []
    # "sparse b3" -> b3, "B0 dense" -> b0
    variants = {name.split()[-1] if name.startswith("sparse") else "b0" for name in budgets}
    for variant in sorted(variants):
        run = _Kernel(
            variant,
            (kernel.block_q, kernel.block_kv),
            tcfg.attention_head_dim,
            cfg.dtype.value,
            kernel.block_kv_compute,
            kernel.vmem_limit_bytes,
        )
        reason = _vmem_refusal(compiler.device, run)
        if reason is not None:
            fix = _fitting_setting(compiler.device, run, cfg.resolution.video.tokens)
            found.append(
                f"compile for {compiler.describe()}: Mosaic refuses the {variant} kernel's "
                f"tiles {kernel.block_q}x{kernel.block_kv} ({reason}; checked in seconds at a "
                f"short sequence: its VMEM does not grow with N). Checked with Mosaic: {fix}"
            )
    return found


def _vmem_refusal(device: Any, run: _Kernel) -> str | None:
    """Mosaic's VMEM refusal of ``run`` compiled at a sequence of a few tiles, in one line, or
    None when it compiles."""
    from kernels.executors.pallas_tpu import pallas_blocksparse_attention

    tokens = 4 * max(run.tiles)
    mask = PaddingMask(tokens) if run.variant == "b0" else BandMask(tokens, tokens // 2, 0)
    plan = build_plan(mask, BlockSizes(*run.tiles), run.variant, rounding_tolerance=None)
    qkv = jax.ShapeDtypeStruct((1, tokens, 1, run.head_dim), jnp.dtype(run.dtype))

    def call(q, k, v):
        return pallas_blocksparse_attention(
            q,
            k,
            v,
            plan,
            variant=run.variant,
            block_kv_compute=run.block_kv_compute,
            vmem_limit_bytes=run.vmem_limit,
            check_budget=False,
        )

    try:
        compile_for(device, call, qkv, qkv, qkv)
    except Exception as error:  # noqa: BLE001 - only VMEM refusals mean "does not fit"
        if "scoped allocation" in str(error).lower() or "vmem" in str(error).lower():
            return compiler_reason(error)
        raise
    return None


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


def _fitting_setting(device: Any, run: _Kernel, tokens: int) -> str:
    """A setting under which Mosaic compiles the refused ``run``, checked by compiling it: e.g.
    ``kernel.vmem_limit_bytes=50331648 compiles (...)``, or smaller tiles that compile at the
    default limit (their visit tables fitting SMEM at the run's ``tokens``), or that none does."""

    def compiles(**change: Any) -> bool:
        return _vmem_refusal(device, dataclasses.replace(run, **change)) is None

    start = run.vmem_limit or DEFAULT_SCOPED_VMEM_BYTES
    need = mosaic_vmem_need(lambda limit: compiles(vmem_limit=limit), start, VMEM_AUTO_CAP_BYTES)
    if need is not None:
        return (
            f"kernel.vmem_limit_bytes={need} compiles (Mosaic compiled these tiles at "
            f"{need // MiB} MiB)"
        )
    for smaller in _smaller_tiles(run.tiles):
        if dense_table_smem_bytes(tokens, *smaller) > SMEM_LIMIT_BYTES:
            continue
        if compiles(tiles=smaller, block_kv_compute=None, vmem_limit=None):
            return (
                f"kernel.block_q={smaller[0]} kernel.block_kv={smaller[1]} compiles (Mosaic, at "
                "its default VMEM limit; SMEM fits at the run's length)"
            )
    cap = VMEM_AUTO_CAP_BYTES // MiB
    return f"no tile pair from {run.tiles[0]}x{run.tiles[1]} down compiles under {cap} MiB of VMEM"


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


def compile_refusal(error: BaseException, cfg: EvalConfig) -> str | None:
    """The one line for a compile the chip refused for want of scoped VMEM (None for any other
    error), naming the settings that change it.

    Args:
        error: what the arms' compile raised.
        cfg: the run's resolved config (its tiles are named).
    """
    shortfall = scoped_vmem_shortfall(error)
    if shortfall is None:
        return None
    need, limit = shortfall
    k = cfg.kernel
    return (
        f"refused by the chip's compiler: a Pallas kernel needs {need}B of scoped VMEM over a "
        f"limit of {limit}B (Mosaic, XLA error E1001) at tiles {k.block_q} x {k.block_kv}; set "
        "smaller kernel.block_q / kernel.block_kv, a smaller kernel.block_kv_compute, or a "
        "larger kernel.vmem_limit_bytes for the sparse kernel; for the splash control raise the "
        "compiler's limit (LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=<KiB>), which its "
        "tile rule reads"
    )
