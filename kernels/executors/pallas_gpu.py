"""Pallas GPU (Triton) block-sparse attention over a tile plan's visit lists.

One program per (query tile, batch, head) keeps its query tile, the online-softmax state (running
max and sum [block_q], accumulator [block_q, head_dim], float32) in registers and walks two loops
over key tiles (``kernels.executors.pallas_gpu_visits``): the mask-free visits, then the masked
ones. Each step decodes the key tile index from a run-length visit code (a few scalar loads and
adds; a band row is one or two runs), loads that [block_kv, head_dim] tile of K and V from global
memory at a dynamic offset, and updates the softmax. Triton pipelines these loads over
``num_stages`` shared-memory buffers. Masked visits evaluate the plan's predicate on token
indices built from iotas (``kernels.executors.predicates``), so nothing mask-shaped is read.

Consecutive programs are consecutive query tiles of one head (the query tile is the fastest grid
axis), so the key tiles of neighbouring bands are reused from L2.

Variants follow ``kernels.plans.tiles``: b0 dense, b1 every visit masked, b2 full tiles mask-free
and partial tiles masked, b3 a tile-rounded plan whose masked tiles only hold padding.

On CPU the kernel runs with ``interpret=True`` and lowers for CUDA under ``jax.export`` with
``platforms=["cuda"]`` and ``disabled_checks=CUDA_EXPORT_DISABLED_CHECKS`` (the Triton call is a
custom call that export does not guarantee stable); Triton compiles it on the GPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from kernels.executors.kernel_inputs import (
    check_kernel_inputs,
    check_platform,
    matmul_precision,
    program_builder,
)
from kernels.executors.pallas_gpu_budget import (
    DEFAULT_NUM_STAGES,
    check_gpu_tiles,
    default_num_warps,
)
from kernels.executors.pallas_gpu_visits import GpuVisits, plan_gpu_visits
from kernels.executors.pallas_tpu_visits import plan_block_sizes
from kernels.executors.predicates import partial_predicate
from kernels.executors.xla_visit_code import TABLE, VisitCode
from kernels.masks.protocols import TilePlanLike
from kernels.plans.block_sizes import BACKEND_MULTIPLE, is_power_of_two

# Tensor-core dots need at least 16 rows and columns; Triton tensors have power-of-two shapes
# (the tile rule of ``kernels.plans.block_sizes`` for this backend).
MIN_BLOCK = BACKEND_MULTIPLE["pallas_gpu"]
# Finite "minus infinity" (as in the TPU kernel): a row whose scores in a tile are all masked gets
# exp2(0) = 1 terms that the next real maximum rescales to exactly zero, never NaN.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
# The Triton kernel is a custom call ``jax.export`` does not guarantee stable across versions.
CUDA_EXPORT_DISABLED_CHECKS = (jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton"),)


def _visit_decoder(code_ref, code: VisitCode, row: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """``index(step)`` of one row of a coded visit list, read from ``code_ref`` [g, C].

    The row's run starts, break positions and jumps are loaded once, before the loop; a step
    then costs at most ``breaks`` compares and adds (``kernels.executors.xla_visit_code``).
    """
    if code.kind == TABLE:
        return lambda step: code_ref[row, step + 1].astype(jnp.int32)
    first = code_ref[row, 1].astype(jnp.int32)
    r = code.breaks
    positions = [code_ref[row, 2 + b].astype(jnp.int32) for b in range(r)]
    jumps = [code_ref[row, 2 + r + b].astype(jnp.int32) for b in range(r)]

    def index(step: jax.Array) -> jax.Array:
        value = first + step
        for position, jump in zip(positions, jumps, strict=True):
            value = value + jnp.where(step >= position, jump, 0)
        return value

    return index


def _blocksparse_kernel(
    *refs,
    full: VisitCode | None,
    masked: VisitCode | None,
    block_q: int,
    block_kv: int,
    allowed: Callable,
    precision: lax.Precision,
) -> None:
    """One program: query tile ``program_id(0)`` of one (batch, head).

    Refs, in order: the coded full list [g, Cf] (when ``full``), the coded masked list [g, Cm]
    (when ``masked``), q [block_q, head_dim], k and v [kv_padded, head_dim] (this head's whole
    padded sequence), out [block_q, head_dim].
    """
    refs = list(refs)
    full_ref = refs.pop(0) if full is not None else None
    masked_ref = refs.pop(0) if masked is not None else None
    q_ref, k_ref, v_ref, o_ref = refs
    i = pl.program_id(0)
    q = q_ref[...]
    head_dim = q.shape[-1]
    q_pos = i * block_q + jnp.arange(block_q, dtype=jnp.int32)[:, None]

    def visit(carry, kv_tile: jax.Array, apply_mask: bool):
        m_prev, l_prev, acc_prev = carry
        start = kv_tile * block_kv
        k = k_ref[pl.ds(start, block_kv), :]
        # q carries 1/sqrt(d) and log2(e): scores are in base-2 units, so exp2 below.
        s = plgpu.dot(q, k, trans_b=True, precision=precision)  # [block_q, block_kv] float32
        if apply_mask:
            k_pos = start + jnp.arange(block_kv, dtype=jnp.int32)[None, :]
            s = jnp.where(allowed(q_pos, k_pos), s, MASK_VALUE)
        m_next = jnp.maximum(m_prev, jnp.max(s, axis=1))
        p = jnp.exp2(s - m_next[:, None])
        alpha = jnp.exp2(m_prev - m_next)  # rescales what was accumulated so far
        l_next = alpha * l_prev + jnp.sum(p, axis=1)
        v = v_ref[pl.ds(start, block_kv), :]
        pv = plgpu.dot(p.astype(v.dtype), v, precision=precision)  # [block_q, head_dim]
        return m_next, l_next, alpha[:, None] * acc_prev + pv

    carry = (
        jnp.full((block_q,), MASK_VALUE, jnp.float32),
        jnp.zeros((block_q,), jnp.float32),
        jnp.zeros((block_q, head_dim), jnp.float32),
    )
    for code_ref, code, apply_mask in ((full_ref, full, False), (masked_ref, masked, True)):
        if code is None:
            continue
        index = _visit_decoder(code_ref, code, i)

        def body(j, carry, index=index, apply_mask=apply_mask):
            return visit(carry, index(j), apply_mask)

        count = code_ref[i, 0].astype(jnp.int32)
        carry = lax.fori_loop(0, count, body, carry)
    _, l_final, acc = carry
    # A query tile with no visit at all (only possible for pure padding) has l == 0.
    l_final = jnp.where(l_final == 0.0, 1.0, l_final)
    o_ref[...] = (acc / l_final[:, None]).astype(o_ref.dtype)


def _validate(q: jax.Array, k: jax.Array, v: jax.Array, plan: TilePlanLike, variant: str) -> None:
    """Raises ValueError for inputs the kernel does not support (shared checks, then GPU tiles)."""
    check_kernel_inputs(q, k, v, plan, variant)
    for name, value in zip(("block_q", "block_kv"), plan_block_sizes(plan), strict=True):
        if value < MIN_BLOCK or not is_power_of_two(value):
            raise ValueError(
                f"{name} {value} does not suit the GPU kernel: use a power of two of at least "
                f"{MIN_BLOCK} (e.g. kernel=pallas_gpu's 128 x 64)"
            )


def pallas_gpu_blocksparse_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    plan: TilePlanLike,
    *,
    variant: str,
    interpret: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> jax.Array:
    """Block-sparse softmax attention over the tiles a plan lists, as one Pallas GPU kernel.

    Computes ``softmax(q k^T / sqrt(head_dim) + mask) v`` where the mask keeps every pair of a
    mask-free visit and, in masked visits, the pairs the variant's predicate keeps (b1/b2: the
    plan's mask, ``plan.mask.allowed``; b0/b3: padding only). Pairs of unlisted tiles are dropped.

    Where it runs: ``interpret=True`` runs the Pallas interpreter on any backend. With
    ``interpret=False`` an eager call (concrete arrays) off a GPU raises ValueError, but a traced
    call is let through so that ``jax.export.export(jax.jit(f), platforms=["cuda"],
    disabled_checks=CUDA_EXPORT_DISABLED_CHECKS)`` lowers the kernel on a CPU machine. Compiling
    for a GPU (``interpret=False``) checks the shared-memory estimate first
    (``kernels.executors.pallas_gpu_budget.check_gpu_tiles``).

    Args:
        q: [batch, tokens, heads, head_dim] queries (float32 or bfloat16; head_dim 64 or 128).
        k: [batch, tokens, heads, head_dim] keys.
        v: [batch, tokens, heads, head_dim] values.
        plan: a tile plan (``kernels.plans.tiles``): ``full_kv``/``partial_kv`` int32
            [num_q_tiles, max_*], ``full_count``/``partial_count`` int32 [num_q_tiles], ``mask``,
            ``tokens``, ``block_sizes`` (powers of two of at least 16).
        variant: "b0", "b1", "b2" or "b3" (case-insensitive); must match ``plan.variant`` when
            the plan has one.
        interpret: run the kernel in the Pallas interpreter (needed to run on CPU).
        num_warps: warps per program; None: ``default_num_warps(block_q, head_dim)``.
        num_stages: K/V pipeline buffers; None: ``DEFAULT_NUM_STAGES``.

    Returns:
        [batch, tokens, heads, head_dim] attention output in q's dtype.

    Raises:
        ValueError: on unsupported shapes, dtypes, tiles, variants or an inconsistent plan; when
            called eagerly with ``interpret=False`` off a GPU; when compiling for a GPU with
            tiles whose blocks overflow shared memory (the message names tiles that fit).
    """
    variant = str(variant).lower()
    _validate(q, k, v, plan, variant)
    check_platform(q, interpret, "gpu", "cuda")
    for name, value in (("num_warps", num_warps), ("num_stages", num_stages)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}; expected a positive int or None")
    forward = program_builder(_build_forward, plan)(
        plan, variant, tuple(q.shape), jnp.dtype(q.dtype), interpret, num_warps, num_stages
    )
    return forward(q, k, v)


@functools.lru_cache(maxsize=64)
def _build_forward(
    plan: TilePlanLike,
    variant: str,
    shape: tuple[int, int, int, int],
    dtype: jnp.dtype,
    interpret: bool,
    num_warps: int | None,
    num_stages: int | None,
) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """Builds the jitted (q, k, v) -> out function for one plan and input signature.

    Cached by plan identity (``kernels.plans.tiles.TilePlan`` hashes by identity), so repeated
    eager calls reuse one compiled program.
    """
    batch, tokens, heads, head_dim = shape
    block_q, block_kv = plan_block_sizes(plan)
    stages = DEFAULT_NUM_STAGES if num_stages is None else num_stages
    warps = default_num_warps(block_q, head_dim) if num_warps is None else num_warps
    if not interpret:  # the interpreter has no shared memory to run out of
        check_gpu_tiles(block_q, block_kv, head_dim, dtype, stages)
    visits: GpuVisits = plan_gpu_visits(plan, variant)
    codes = [c for c in (visits.full, visits.masked) if c is not None]
    q_padded = visits.num_q_tiles * block_q
    kv_padded = visits.num_kv_tiles * block_kv
    kernel = functools.partial(
        _blocksparse_kernel,
        full=visits.full,
        masked=visits.masked,
        block_q=block_q,
        block_kv=block_kv,
        allowed=partial_predicate(plan, variant, tokens),
        precision=matmul_precision(dtype),
    )
    tile_spec = pl.BlockSpec((None, block_q, None, head_dim), lambda i, b, h: (b, i, h, 0))
    head_spec = pl.BlockSpec((None, kv_padded, None, head_dim), lambda i, b, h: (b, 0, h, 0))
    # Query tiles fastest: neighbouring programs share K/V tiles through L2.
    call = pl.pallas_call(
        kernel,
        grid=(visits.num_q_tiles, batch, heads),
        in_specs=[*(pl.no_block_spec for _ in codes), tile_spec, head_spec, head_spec],
        out_specs=tile_spec,
        out_shape=jax.ShapeDtypeStruct((batch, q_padded, heads, head_dim), dtype),
        compiler_params=plgpu.CompilerParams(num_warps=warps, num_stages=stages),
        interpret=interpret,
        name=f"blocksparse_attention_gpu_{variant}",
    )

    def _forward(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        # Scale q once (fused with the padding by XLA) rather than per visit in the kernel.
        scale = math.log2(math.e) / math.sqrt(head_dim)
        q_scaled = (q.astype(jnp.float32) * scale).astype(q.dtype)
        pad_q = ((0, 0), (0, q_padded - tokens), (0, 0), (0, 0))
        pad_kv = ((0, 0), (0, kv_padded - tokens), (0, 0), (0, 0))
        out = call(
            *(jnp.asarray(c.code) for c in codes),
            jnp.pad(q_scaled, pad_q),
            jnp.pad(k, pad_kv),
            jnp.pad(v, pad_kv),
        )
        return out[:, :tokens]

    # One XLA program for padding, kernel and slicing; under an outer jit this simply inlines.
    return jax.jit(_forward)
