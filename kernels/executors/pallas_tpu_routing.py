"""Routing's sampled outputs (``kernels.policy.routing.sampled_outputs``) as one Pallas TPU kernel.

Routing compares, for R sampled query rows, the attention output over every key with the outputs
under the spatial and the temporal mask. In XLA the float32 scores [B, H, R, N] (464 MB at 720p
for Wan 1.3B's 24 batch-heads and R = 64) are written to HBM once and read back four times, and
q is relaid out for the row gather: routing timed alone took 10.9 ms at 720p on a TPU v5e, for a
few hundred microseconds of matrix work (docs/benchmarks.md). Here each (batch, head) walks the keys
tile by tile with three online softmaxes side by side (one per mask, each with its own running
maximum, as the oracle's three softmaxes each have theirs), so the scores never leave VMEM: HBM
sees k and v once and the two keep masks (packed as one code per pair) once per (batch, head).

Operands are held as the block-sparse kernel holds them (``kernels.executors.pallas_tpu_operands``):
k and v in place as [B, N, H * D] where head_dim fills whole 128-lane columns, else heads-leading.
The last key tile may run past N: Pallas clips its copies, and those keys are masked out of all
three softmaxes and their rows of v zeroed (a zero weight times a non-finite leftover is not zero).
The last row tile may run past R: its extra rows are garbage and never written.

``kernels.policy.routing.routing_outputs_for`` is the one rule that decides which computation a
run's routing uses.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels.executors.kernel_inputs import matmul_precision
from kernels.executors.pallas_tpu import MASK_VALUE
from kernels.executors.pallas_tpu_operands import (
    LANES,
    operand_block_index,
    reads_in_place,
    to_kernel_operand,
)

# Rows and keys per grid step: at most ROUTING_BLOCK_ROWS sampled rows, and keys so that the
# [rows, keys] float32 scores stay at 64 x 2048 (512 KiB; their three exponentials a few MiB of
# VMEM). At R = 64 a step moves about 1 MiB of k and v, enough to keep the DMAs busy; more rows
# (the oracle's every row) take more row tiles, each reading k and v again.
ROUTING_BLOCK_ROWS = 256
ROUTING_SCORES_PER_STEP = 64 * 2048
MASKS = 3  # every key, the spatial mask's, the temporal mask's
# A pair's keep code (``keep_codes``): which of the two masks keep it.
SPATIAL, TEMPORAL, BOTH = 1.0, 2.0, 3.0


def _routing_kernel(
    q_ref,
    k_ref,
    v_ref,
    code_ref,
    o_ref,
    m_ref,
    l_ref,
    acc_ref,
    *,
    scale: float,
    tokens: int,
    block_kv: int,
) -> None:
    """One (batch * head, row tile, key tile j): q_ref [Tr, D]; k_ref, v_ref [Tk, D]; code_ref
    [Tr, Tk] (``keep_codes``); o_ref [3, Tr, D] float32; scratch m_ref, l_ref [3, Tr, 128] and
    acc_ref [3, Tr, D] float32 (the three softmaxes' running max, sum and output)."""
    j = pl.program_id(2)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, MASK_VALUE, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    precision = matmul_precision(q_ref.dtype)
    scores = (
        lax.dot_general(
            q_ref[...],
            k_ref[...],
            (((1,), (1,)), ((), ())),
            precision=precision,
            preferred_element_type=jnp.float32,
        )
        * scale
    )  # [R, Tk]
    v = v_ref[...]
    valid = None
    if tokens % block_kv:  # the last tile's keys past the end: out of every softmax
        keys = j * block_kv + lax.broadcasted_iota(jnp.int32, scores.shape, 1)
        valid = keys < tokens
        rows = j * block_kv + lax.broadcasted_iota(jnp.int32, v.shape, 0)
        v = jnp.where(rows < tokens, v, jnp.zeros_like(v))
    code = code_ref[...].astype(jnp.float32)
    keeps = [valid]  # every key (that exists), then the two masks'
    for keep in (jnp.logical_or(code == SPATIAL, code == BOTH), code >= TEMPORAL):
        keeps.append(keep if valid is None else jnp.logical_and(keep, valid))
    for index, keep in enumerate(keeps):
        # MASK_VALUE is a finite "minus infinity": a row with nothing kept yet gives exp(0)
        # terms that its first kept key's maximum rescales to exactly zero.
        masked = scores if keep is None else jnp.where(keep, scores, MASK_VALUE)
        _update(index, masked, v, m_ref, l_ref, acc_ref, precision=precision)

    @pl.when(j == pl.num_programs(2) - 1)
    def _finalize():
        for index in range(MASKS):
            o_ref[index] = acc_ref[index] / l_ref[index][:, :1]


def _update(index: int, scores, v, m_ref, l_ref, acc_ref, *, precision) -> None:
    """One online-softmax update of softmax ``index`` with a tile's masked scores [R, Tk]."""
    m_prev = m_ref[index]
    m_next = jnp.maximum(m_prev, jnp.max(scores, axis=1, keepdims=True))  # [R, 128]
    p = jnp.exp(scores - jnp.tile(m_next, (1, scores.shape[1] // LANES)))
    alpha = jnp.exp(m_prev - m_next)
    l_ref[index] = alpha * l_ref[index] + jnp.sum(p, axis=1, keepdims=True)
    m_ref[index] = m_next
    pv = lax.dot_general(
        p.astype(v.dtype),
        v,
        (((1,), (0,)), ((), ())),
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    acc_ref[index] = alpha[:, :1] * acc_ref[index] + pv  # any head_dim


def keep_codes(spatial_keep: jax.Array, temporal_keep: jax.Array, dtype) -> jax.Array:
    """Both masks as one array the kernel reads once: ``SPATIAL`` where only the spatial mask
    keeps a pair, ``TEMPORAL`` where only the temporal one does, ``BOTH``, or 0.

    Args:
        spatial_keep: bool [R, N].
        temporal_keep: bool [R, N].
        dtype: a float dtype (the kernel compares floats: small integers are exact in any).

    Returns:
        [R, N] of ``dtype``.
    """
    codes = spatial_keep.astype(jnp.int32) * int(SPATIAL) + temporal_keep.astype(jnp.int32) * int(
        TEMPORAL
    )
    return codes.astype(dtype)


def pallas_sampled_outputs(
    q_rows: jax.Array,
    k: jax.Array,
    v: jax.Array,
    spatial_keep: jax.Array,
    temporal_keep: jax.Array,
    *,
    block_rows: int = ROUTING_BLOCK_ROWS,
    block_kv: int | None = None,
    interpret: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``kernels.policy.routing.sampled_outputs`` as one Pallas TPU kernel.

    Args:
        q_rows, k, v, spatial_keep, temporal_keep: as ``sampled_outputs``'s: the sampled query
            rows [B, R, H, D] (unscaled), keys and values [B, N, H, D], and each mask's keep
            flags, bool [R, N] over frame-major keys.
        block_rows: sampled rows per grid step, a positive multiple of 16 (all R when fewer).
        block_kv: keys per grid step, a positive multiple of 128 (fewer when N is smaller);
            None: ``ROUTING_SCORES_PER_STEP`` over the rows, rounded down to 128.
        interpret: Pallas interpret mode (CPU tests).

    Returns:
        (dense, spatial, temporal), float32 [B, H, R, D] each: the oracle's up to the matrix units'
        summation order (and, for bfloat16 inputs, the probabilities rounded to v's dtype for the
        product with v, as the TPU's default matmul precision rounds the oracle's).

    Raises:
        ValueError: mismatched shapes or a bad tile.
    """
    b, r, heads, d = q_rows.shape
    n = k.shape[1]
    if k.shape != v.shape or k.shape[0] != b or k.shape[2:] != (heads, d):
        raise ValueError(f"k {k.shape} and v {v.shape} do not match q_rows {q_rows.shape}")
    if spatial_keep.shape != (r, n) or temporal_keep.shape != (r, n):
        raise ValueError(
            f"keep masks {spatial_keep.shape} and {temporal_keep.shape}: expected [R, N] = {(r, n)}"
        )
    if block_rows < 16 or block_rows % 16:
        raise ValueError(f"block_rows={block_rows}: expected a positive multiple of 16")
    rows = r if r <= block_rows else block_rows
    if block_kv is None:
        block_kv = max(LANES, ROUTING_SCORES_PER_STEP // rows // LANES * LANES)
    if block_kv < LANES or block_kv % LANES:
        raise ValueError(f"block_kv={block_kv}: expected a positive multiple of {LANES}")
    tile = min(block_kv, -(-n // LANES) * LANES)
    in_place = reads_in_place(heads, d)

    q_spec = pl.BlockSpec(
        (None, rows, d), lambda bh, i, j: operand_block_index(bh, i, heads, in_place)
    )
    kv_spec = pl.BlockSpec(
        (None, tile, d), lambda bh, i, j: operand_block_index(bh, j, heads, in_place)
    )
    qh, kh, vh = (to_kernel_operand(x, in_place) for x in (q_rows, k, v))
    out = pl.pallas_call(
        functools.partial(_routing_kernel, scale=1.0 / math.sqrt(d), tokens=n, block_kv=tile),
        grid=(b * heads, pl.cdiv(r, rows), pl.cdiv(n, tile)),
        in_specs=[q_spec, kv_spec, kv_spec, pl.BlockSpec((rows, tile), lambda bh, i, j: (i, j))],
        out_specs=pl.BlockSpec((None, MASKS, rows, d), lambda bh, i, j: (bh, 0, i, 0)),
        out_shape=jax.ShapeDtypeStruct((b * heads, MASKS, r, d), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM((MASKS, rows, LANES), jnp.float32),
            pltpu.VMEM((MASKS, rows, LANES), jnp.float32),
            pltpu.VMEM((MASKS, rows, d), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=interpret,
        name="routing_outputs",
    )(qh, kh, vh, keep_codes(spatial_keep, temporal_keep, q_rows.dtype))
    dense, spatial, temporal = jnp.moveaxis(out.reshape(b, heads, MASKS, r, d), 2, 0)
    return dense, spatial, temporal
