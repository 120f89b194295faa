"""TPU v6e memory budget of the Pallas block-sparse kernel: SMEM visit tables, VMEM working set.

Lowering the kernel for platform "tpu" works on a CPU machine (``jax.export``), but Mosaic's own
compile, where SMEM and VMEM are allocated, runs only inside libtpu on a TPU. This module redoes
that bookkeeping with plain arithmetic (NumPy for the visit table; nothing traced, nothing
allocated on a device) so a run that cannot fit is refused up front with numbers and a fix.

The two memories scale differently with the sequence length N:
- SMEM holds the scalar-prefetched visit table, about (N / block_q) * (N / block_kv) codes for a
  dense plan: it grows with N squared and shrinks with the tile area.
- VMEM holds the blocks and temporaries of one grid step: it depends on the tiles, head_dim,
  dtype and compute chunk, not on N.

The budget is for TPU v6e, the chip of the seed's measurements.
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike

from kernels.executors.pallas_tpu_visits import (
    CODE_PACK_LIMIT,
    VisitSlots,
    plan_block_sizes,
    plan_visit_slots,
)
from kernels.executors.tpu_generation import SCOPED_VMEM_DEFAULTS, SMALLEST_SCOPED_VMEM
from kernels.masks.protocols import TilePlanLike
from kernels.plans.block_sizes import auto_block_sizes

KiB = 1 << 10
MiB = 1 << 20
# Scalar memory per TensorCore on v6e (shared/reference/facts.md, "Real hardware").
SMEM_BYTES = 1 * MiB
# The visit table is not SMEM's only user: Mosaic keeps grid indices, DMA semaphores, scalar
# spills and any padding of the prefetched arrays there too. An eighth is held back for them.
SMEM_RESERVED_BYTES = 128 * KiB
SMEM_LIMIT_BYTES = SMEM_BYTES - SMEM_RESERVED_BYTES
VMEM_PHYSICAL_BYTES = 128 * MiB
# Default scoped VMEM limits of a Mosaic kernel, one table for every Pallas TPU kernel
# (``kernels.executors.tpu_generation``, with their sources): v6e's 32 MiB, and the smallest
# among the TPUs the kernel runs on, v5e's 16 MiB. An estimate within the smallest keeps the
# compiler default on every generation; above it the kernel asks for a limit.
DEFAULT_SCOPED_VMEM_BYTES = SCOPED_VMEM_DEFAULTS["v6e"]
SMALLEST_DEFAULT_SCOPED_VMEM_BYTES = SMALLEST_SCOPED_VMEM
# Automatic limit when the estimate exceeds the default: estimate x margin (the estimate is a model
# of Mosaic's allocator, not a copy of it), rounded up to a MiB, capped at three quarters of the
# physical VMEM so Mosaic's internal scratch and the double buffers of neighbours keep room.
VMEM_AUTO_MARGIN = 1.25
VMEM_AUTO_CAP_BYTES = VMEM_PHYSICAL_BYTES * 3 // 4
# Key chunk per online-softmax update when none is asked for: gcd(block_kv, 512) bounds the
# [block_q, chunk] float32 score temporaries (the seed runs block_kv = 1536, i.e. 3 chunks).
DEFAULT_BLOCK_KV_COMPUTE = 512
NUM_LANES = 128
# Live [block_q, chunk] 32-bit temporaries of one chunk update: the scores s, the lane-tiled row
# maximum and the probabilities p on the mask-free path; s and the two iota position arrays on
# the masked one (the keep mask and jnp.where output replace them as they die).
SCORE_TEMPORARIES = 3


def resolve_block_kv_compute(block_kv: int, block_kv_compute: int | None) -> int:
    """The key chunk per online-softmax update: as requested, else gcd(block_kv, 512).

    Raises:
        ValueError: unless the chunk is a multiple of 128 that divides ``block_kv``.
    """
    if block_kv_compute is None:
        block_kv_compute = math.gcd(block_kv, DEFAULT_BLOCK_KV_COMPUTE)
    if block_kv_compute <= 0 or block_kv_compute % NUM_LANES or block_kv % block_kv_compute:
        raise ValueError(
            f"block_kv_compute {block_kv_compute} must be a multiple of {NUM_LANES} that divides "
            f"block_kv {block_kv}"
        )
    return block_kv_compute


def _itemsize(dtype: DTypeLike) -> int:
    """Bytes per element of ``dtype`` (a NumPy/JAX dtype or its name, bfloat16 included)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        dtype = ml_dtypes.bfloat16
    return int(np.dtype(dtype).itemsize)


def kernel_vmem_bytes(
    block_q: int,
    block_kv: int,
    head_dim: int,
    dtype: DTypeLike,
    block_kv_compute: int | None = None,
) -> int:
    """Estimated VMEM working set of one kernel instance (a model, independent of N): the larger
    of the count below and, at the default chunk, Mosaic's measured need (``mosaic_fitted_vmem_bytes``).

    Counts, per grid step:
    - the pipelined blocks, each double-buffered by the Pallas pipeline in the input dtype:
      q and o [block_q, head_dim], k and v [block_kv, head_dim];
    - the float32 scratch carried across visits: m and l [block_q, 128] (lane-replicated), acc
      [block_q, head_dim];
    - the per-chunk temporaries: ``SCORE_TEMPORARIES`` 32-bit [block_q, chunk] arrays plus p cast
      to the input dtype for the P.V matmul, and the float32 [block_q, 128] new maximum and
      rescale factor plus the [block_q, head_dim] P.V product.
    Vector registers and Mosaic's internal scratch are left to the margin of the automatic limit.

    Args:
        block_q: query tile rows.
        block_kv: key/value tile rows.
        head_dim: head dimension d.
        dtype: input dtype (bfloat16 or float32).
        block_kv_compute: key chunk per update (None: gcd(block_kv, 512)).

    Returns:
        Bytes.
    """
    chunk = resolve_block_kv_compute(block_kv, block_kv_compute)
    item = _itemsize(dtype)
    blocks = 2 * (2 * block_q + 2 * block_kv) * head_dim * item
    row_state = (2 * block_q * NUM_LANES + block_q * head_dim) * 4
    scores = block_q * chunk * (SCORE_TEMPORARIES * 4 + item)
    counted = blocks + 2 * row_state + scores  # scratch, then its per-update temporaries
    if chunk != math.gcd(block_kv, DEFAULT_BLOCK_KV_COMPUTE):
        return counted  # Mosaic measured below this count at every other chunk we tried
    return max(counted, mosaic_fitted_vmem_bytes(block_q, block_kv, head_dim, item))


# Mosaic's scoped VMEM for the kernel at the default chunk, measured for v6e by bisecting
# ``vmem_limit_bytes`` (libtpu 0.0.42.1, bf16, head_dim 128, b3): 512x512 2.00 MiB, 512x1024 2.75,
# 1024x512 4.25, 1024x1024 4.50, 2048x1024 9.00, 1024x2048 8.25, 2048x2048 15.25, 3328x1536
# 18.75, 4096x2048 29.25, 2048x4096 27.75, 4096x4096 53.75. A least-squares fit: about 3.03 bytes
# per (query, key) pair of a tile, 967 per query row, 157 per key row and 0.87 MiB; within 11% of
# every point from 1024x1024 up. The unrolled chunk loop keeps each chunk's temporaries, so large
# tiles need more than the per-chunk count above (2.0-2.7x less at small tiles).
_FIT_PER_PAIR, _FIT_PER_Q, _FIT_PER_KV, _FIT_FIXED = 3.03, 967, 157, 911_000
# Headroom over the fit, so the model stays at or above every measured point.
_FIT_MARGIN = 1.05


def mosaic_fitted_vmem_bytes(block_q: int, block_kv: int, head_dim: int, item: int) -> int:
    """Mosaic's measured scoped VMEM at the default chunk (fit above, plus ``_FIT_MARGIN``),
    scaled by the element size, and by head_dim for the per-row terms (unmeasured beyond bf16 and
    head_dim 128)."""
    scale = item / 2
    rows = (_FIT_PER_Q * block_q + _FIT_PER_KV * block_kv) * head_dim / 128
    fitted = (_FIT_PER_PAIR * block_q * block_kv + rows) * scale + _FIT_FIXED
    return int(_FIT_MARGIN * fitted)


def auto_vmem_limit_bytes(vmem_bytes: int) -> int | None:
    """The limit the kernel asks Mosaic for when none is given (None: keep the default).

    Rule: an estimate within ``SMALLEST_DEFAULT_SCOPED_VMEM_BYTES`` keeps the compiler default;
    a larger one gets ``estimate * VMEM_AUTO_MARGIN`` rounded up to a MiB, at least v6e's
    default ``DEFAULT_SCOPED_VMEM_BYTES`` (so v6e never compiles under less than its default) and
    at most ``VMEM_AUTO_CAP_BYTES`` (an estimate above the cap does not fit; see
    ``check_tpu_budget``).
    """
    if vmem_bytes <= SMALLEST_DEFAULT_SCOPED_VMEM_BYTES:
        return None
    wanted = math.ceil(vmem_bytes * VMEM_AUTO_MARGIN / MiB) * MiB
    return min(max(wanted, DEFAULT_SCOPED_VMEM_BYTES), VMEM_AUTO_CAP_BYTES)


def dense_table_smem_bytes(tokens: int, block_q: int, block_kv: int) -> int:
    """SMEM bytes of a dense (b0) plan's tables, from the tile counts alone (for suggestions)."""
    num_q, num_kv = math.ceil(tokens / block_q), math.ceil(tokens / block_kv)
    per_word = 2 if 2 * num_kv - 1 < CODE_PACK_LIMIT else 1
    return 4 * math.ceil(num_q * num_kv / per_word) + 4 * num_q


def visit_table_smem_bytes(plan: TilePlanLike, variant: str) -> int:
    """Bytes of the scalar-prefetched tables (packed visit codes + counts) the kernel builds."""
    return plan_visit_slots(plan, str(variant).lower()).smem_bytes()


@dataclasses.dataclass(frozen=True)
class TpuBudget:
    """SMEM and VMEM use of one kernel configuration against the v6e limits.

    Attributes:
        smem_bytes: scalar-prefetched table bytes.
        smem_limit: SMEM the tables may use (``SMEM_LIMIT_BYTES``).
        vmem_bytes: estimated VMEM working set (``kernel_vmem_bytes``).
        vmem_limit: the scoped VMEM limit the kernel runs under (asked for or automatic).
        compiler_vmem_limit: what the kernel passes as ``vmem_limit_bytes`` (None: the default).
        fits: True when there are no problems.
        problems: one message per exceeded limit, with the numbers and a fix.
    """

    smem_bytes: int
    smem_limit: int
    vmem_bytes: int
    vmem_limit: int
    compiler_vmem_limit: int | None
    fits: bool
    problems: list[str]

    def require(self) -> TpuBudget:
        """Returns self, or raises ValueError listing the problems and their fixes."""
        if not self.fits:
            raise ValueError("Pallas TPU kernel does not fit a v6e: " + "; ".join(self.problems))
        return self


def _size(n: int) -> str:
    """Bytes for a message: MiB to one decimal from 1 MiB up, else whole KiB (rounded up)."""
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{math.ceil(n / KiB)} KiB"


def _fitting_tiles(tokens: int, head_dim: int, dtype: DTypeLike) -> str:
    """The smallest tiles (by area, squarest first) whose dense table and VMEM fit, and the seed's."""
    seed = auto_block_sizes(tokens, "pallas_tpu")
    sizes = [NUM_LANES << k for k in range(12) if NUM_LANES << k <= 2 * seed.block_q]
    candidates = {(seed.block_q, seed.block_kv)} | {(q, kv) for q in sizes for kv in sizes}
    seed_bytes = dense_table_smem_bytes(tokens, seed.block_q, seed.block_kv)
    seed_note = f"the seed's {seed.block_q}x{seed.block_kv} needs {_size(seed_bytes)}"
    for block_q, block_kv in sorted(candidates, key=lambda t: (t[0] * t[1], abs(t[0] - t[1]))):
        smem = dense_table_smem_bytes(tokens, block_q, block_kv)
        vmem = kernel_vmem_bytes(block_q, block_kv, head_dim, dtype)
        if smem <= SMEM_LIMIT_BYTES and vmem <= VMEM_AUTO_CAP_BYTES:
            return f"block_q={block_q} block_kv={block_kv} fits ({_size(smem)} even dense); {seed_note}"
    return f"no power-of-two tile fits; {seed_note}"


def _vmem_fix(block_q: int, block_kv: int, head_dim: int, dtype: DTypeLike, limit: int) -> str:
    """A compute chunk, else a query tile, that brings the estimate under ``limit``."""
    for chunk in range(block_kv, 0, -NUM_LANES):
        if (
            block_kv % chunk == 0
            and kernel_vmem_bytes(block_q, block_kv, head_dim, dtype, chunk) <= limit
        ):
            return f"kernel.block_kv_compute={chunk}"
    for rows in range((block_q - 1) // NUM_LANES * NUM_LANES, 0, -NUM_LANES):
        if kernel_vmem_bytes(rows, block_kv, head_dim, dtype, NUM_LANES) <= limit:
            return f"kernel.block_q={rows} with kernel.block_kv_compute={NUM_LANES}"
    return f"smaller tiles than {block_q}x{block_kv}"


def visits_budget(
    visits: VisitSlots,
    *,
    tokens: int,
    block_q: int,
    block_kv: int,
    head_dim: int,
    dtype: DTypeLike,
    block_kv_compute: int | None = None,
    vmem_limit_bytes: int | None = None,
    code_pack_limit: int = CODE_PACK_LIMIT,
) -> TpuBudget:
    """``check_tpu_budget`` for visit slots already built (the kernel's own path).

    Args:
        visits: the kernel's ``VisitSlots``.
        tokens: sequence length N.
        block_q: query tile rows.
        block_kv: key/value tile rows.
        head_dim: head dimension.
        dtype: input dtype.
        block_kv_compute: key chunk per update (None: gcd(block_kv, 512)).
        vmem_limit_bytes: the scoped VMEM limit asked for (None: ``auto_vmem_limit_bytes``).
        code_pack_limit: the kernel's packing threshold (``VisitSlots.codes_per_word``).

    Returns:
        The ``TpuBudget``.
    """
    smem = visits.smem_bytes(code_pack_limit)
    vmem = kernel_vmem_bytes(block_q, block_kv, head_dim, dtype, block_kv_compute)
    compiler_limit = auto_vmem_limit_bytes(vmem) if vmem_limit_bytes is None else vmem_limit_bytes
    limit = DEFAULT_SCOPED_VMEM_BYTES if compiler_limit is None else int(compiler_limit)
    tiles = f"{block_q}x{block_kv} tiles"
    problems = []
    if smem > SMEM_LIMIT_BYTES:
        problems.append(
            f"visit table {_size(smem)} exceeds SMEM {_size(SMEM_BYTES)} (less "
            f"{_size(SMEM_RESERVED_BYTES)} kept for Mosaic) at {tiles} ({visits.num_q_tiles} "
            f"query tiles x {visits.slots} visits, {visits.codes_per_word(code_pack_limit)} codes "
            f"per word); {_fitting_tiles(tokens, head_dim, dtype)}"
        )
    if limit > VMEM_PHYSICAL_BYTES:
        problems.append(
            f"vmem_limit_bytes {limit} exceeds the {_size(VMEM_PHYSICAL_BYTES)} of VMEM a TPU "
            f"v5e or v6e core has; set kernel.vmem_limit_bytes to at most {VMEM_AUTO_CAP_BYTES} "
            "or leave it unset (null: chosen from the kernel's estimate)"
        )
    elif vmem > limit:
        wanted = math.ceil(vmem * VMEM_AUTO_MARGIN / MiB) * MiB
        raise_limit = (
            f"set kernel.vmem_limit_bytes={wanted} or "
            if wanted <= VMEM_AUTO_CAP_BYTES
            else f"more than {_size(VMEM_AUTO_CAP_BYTES)} cannot be granted; use "
        )
        fix = _vmem_fix(block_q, block_kv, head_dim, dtype, min(limit, VMEM_AUTO_CAP_BYTES))
        problems.append(
            f"VMEM {_size(vmem)} > scoped limit {_size(limit)} at {tiles}: {raise_limit}{fix}"
        )
    return TpuBudget(
        smem_bytes=smem,
        smem_limit=SMEM_LIMIT_BYTES,
        vmem_bytes=vmem,
        vmem_limit=limit,
        compiler_vmem_limit=None if compiler_limit is None else int(compiler_limit),
        fits=not problems,
        problems=problems,
    )


def check_tpu_budget(
    plan: TilePlanLike,
    variant: str,
    head_dim: int,
    dtype: DTypeLike,
    block_kv_compute: int | None = None,
    vmem_limit_bytes: int | None = None,
) -> TpuBudget:
    """SMEM and VMEM use of ``pallas_blocksparse_attention`` on ``plan``, against v6e limits.

    Args:
        plan: a tile plan (``kernels.plans.tiles.build_plan``).
        variant: "b0".."b3".
        head_dim: head dimension d.
        dtype: input dtype (bfloat16 or float32).
        block_kv_compute: key chunk per update (None: gcd(block_kv, 512), as the kernel).
        vmem_limit_bytes: scoped VMEM limit asked for (None: the kernel's automatic rule,
            ``auto_vmem_limit_bytes``).

    Returns:
        The ``TpuBudget``; ``fits`` is False when a limit is exceeded.
    """
    block_q, block_kv = plan_block_sizes(plan)
    return visits_budget(
        plan_visit_slots(plan, str(variant).lower()),
        tokens=int(plan.tokens),
        block_q=block_q,
        block_kv=block_kv,
        head_dim=head_dim,
        dtype=dtype,
        block_kv_compute=block_kv_compute,
        vmem_limit_bytes=vmem_limit_bytes,
    )


def require_tpu_budget(
    plan: TilePlanLike,
    variant: str,
    head_dim: int,
    dtype: DTypeLike,
    block_kv_compute: int | None = None,
    vmem_limit_bytes: int | None = None,
) -> TpuBudget:
    """``check_tpu_budget`` that raises ValueError (numbers and a fitting setting) unless it fits."""
    return check_tpu_budget(
        plan, variant, head_dim, dtype, block_kv_compute, vmem_limit_bytes
    ).require()
