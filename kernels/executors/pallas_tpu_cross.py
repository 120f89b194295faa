"""Cross-attention (video queries over the text's keys) as one Pallas TPU kernel.

The text is short (512 tokens for Wan 2.1), so one query tile's float32 scores against every text
key fit in VMEM: the kernel computes ``models.attention.dense_attention``'s own formula (float32
scores and softmax, probabilities cast to v's dtype, float32 accumulation) tile by tile and never
writes the [B, H, N, L] scores to HBM. In XLA those scores are the block's largest temporary and
their round trips through HBM were measured at 12.3 ms a block on a TPU v5e, at 480p and 720p
alike, against about 1 to 2.5 ms of matrix work (docs/benchmarks.md).

q, k, v and the output are held as the block-sparse kernel holds them
(``kernels.executors.pallas_tpu_operands``): where ``head_dim`` is a multiple of 128 (every Wan
2.1 size), in place as [B, tokens, heads * head_dim], a reshape XLA lays out for free inside a
block (compiled alone on [B, tokens, heads, head_dim] arguments, the call pays a relayout of q and
of the output); narrower heads (the tiny CPU models) heads-leading, a copy that costs little at
their sizes. The last query tile may run past the tokens: Pallas clips its copies, and its rows
past the end (garbage, possibly non-finite) are never written.

``cross_attend_for`` is the one rule that decides which cross-attention a run uses; every arm of
a run gets the same one, so it changes no comparison.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels.executors.kernel_inputs import matmul_precision
from kernels.executors.pallas_tpu_operands import (
    from_kernel_operand,
    reads_in_place,
    to_kernel_operand,
)

# Query rows per grid step: [1024, L] float32 scores (2 MiB at L = 512) and their exponentials
# stay well inside the scoped VMEM of every TPU generation.
CROSS_BLOCK_Q = 1024


def _cross_kernel(q_ref, k_ref, v_ref, o_ref, *, scale: float) -> None:
    """One (batch, head, query tile): q_ref and o_ref [Tq, D], k_ref and v_ref [L, D]."""
    precision = matmul_precision(q_ref.dtype)
    scores = (
        jax.lax.dot_general(
            q_ref[...],
            k_ref[...],
            (((1,), (1,)), ((), ())),
            precision=precision,
            preferred_element_type=jnp.float32,
        )
        * scale
    )
    shifted = jnp.exp(scores - jnp.max(scores, axis=1, keepdims=True))
    probs = shifted / jnp.sum(shifted, axis=1, keepdims=True)
    out = jnp.dot(
        probs.astype(v_ref.dtype),
        v_ref[...],
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    o_ref[...] = out.astype(o_ref.dtype)


def pallas_cross_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    block_q: int = CROSS_BLOCK_Q,
    interpret: bool = False,
) -> jax.Array:
    """softmax(q k^T / sqrt(D)) v over a short key sequence, one Pallas TPU kernel.

    Args:
        q: [B, N, H, D] video queries.
        k: [B, L, H, D] text keys.
        v: [B, L, H, D] text values.
        block_q: query rows per grid step (a multiple of 16, bfloat16's sublane tile); the last
            tile may be ragged.
        interpret: Pallas interpret mode (CPU tests).

    Returns:
        [B, N, H, D] in q's dtype, ``models.attention.dense_attention(q, k, v)`` up to the
        matrix units' summation order.

    Raises:
        ValueError: mismatched shapes or a bad tile.
    """
    b, n, heads, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[2:] != (heads, d):
        raise ValueError(f"k {k.shape} and v {v.shape} do not match q {q.shape} ([B, L, H, D])")
    if block_q < 16 or block_q % 16:
        raise ValueError(f"block_q={block_q}: expected a positive multiple of 16")
    tile = min(block_q, -(-n // 16) * 16)
    in_place = reads_in_place(heads, d)

    def index(bi, h, row_tile):
        # In place, head h of batch b is the h-th head_dim-wide column block of [b, tokens, :];
        # heads-leading, it is row b * heads + h of [batch * heads, tokens, head_dim].
        return (bi, row_tile, h) if in_place else (bi * heads + h, row_tile, 0)

    q_spec = pl.BlockSpec((None, tile, d), lambda bi, h, i: index(bi, h, i))
    kv_spec = pl.BlockSpec((None, k.shape[1], d), lambda bi, h, i: index(bi, h, 0))
    qh, kh, vh = (to_kernel_operand(x, in_place) for x in (q, k, v))
    out = pl.pallas_call(
        functools.partial(_cross_kernel, scale=1.0 / math.sqrt(d)),
        grid=(b, heads, pl.cdiv(n, tile)),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=q_spec,
        out_shape=jax.ShapeDtypeStruct(qh.shape, q.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")
        ),
        interpret=interpret,
        name="cross_attention",
    )(qh, kh, vh)
    return from_kernel_operand(out, q.shape, in_place)


def cross_attend_for(backend: str, *, interpret: bool = False) -> Callable[..., jax.Array] | None:
    """The cross-attention a run on ``backend`` uses, or None for the model's own
    (``models.attention.cross_attention``, XLA).

    On ``pallas_tpu``, the Pallas kernel above; other backends keep the model's own. The
    transformer reads it from the self-attention function's ``cross_attend`` attribute, which
    ``make_dense_attend`` and ``AttentionPolicy`` set from this rule, so every arm of a run gets
    the same one. A sequence-parallel wrapper (``kernels.parallel``) has none: sharded tokens keep
    XLA's, which partitions over them.

    Args:
        backend: the run's kernel backend.
        interpret: Pallas interpret mode (CPU tests).

    Returns:
        ``cross_attend(q, k, v, *, step, layer) -> out`` or None.
    """
    if backend != "pallas_tpu":
        return None

    def cross_attend(q, k, v, *, step=None, layer=None):
        del step, layer
        return pallas_cross_attention(q, k, v, interpret=interpret)

    return cross_attend
