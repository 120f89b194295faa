"""Dense attention in pure JAX/XLA, shaped for a CPU's matmul: our CPU dense control "xla_flash".

Exact softmax attention by online softmax (FlashAttention's recurrence) over query chunks and
large key blocks: a ``lax.map`` over query chunks of ``block_q`` rows, each running a ``lax.scan``
over key blocks of ``block_kv`` rows. Every step is two plain batched matmuls
([B, H, BQ, D] x [B, H, BKV, D] -> [B, H, BQ, BKV] and back) with the softmax bookkeeping between
them, so XLA:CPU hands both to its matmul library at full size, and one step's scores (the only
per-step array that grows with the chunk sizes) stay a few MiB.

Why not B0 (``kernels.executors.xla_blocksparse`` with every tile visited): the block-sparse scan
advances *all* query tiles together, so each step writes [B, H, N, BKV] scores (99 MB at 16,128
tokens, 2 heads, 768-wide tiles) and gathers one K/V tile per query tile (for a dense plan, the
same tile copied once per query tile). Here a step touches [B, H, BQ, BKV] scores and slices one
K/V block, which XLA does without a copy of K or V per query chunk.

Ragged lengths: query rows are padded to a multiple of ``block_q`` (padded rows are dropped);
keys are never padded: the scan covers the whole key blocks and one last, narrower step covers the
``tokens % block_kv`` remaining keys, so no step needs a mask.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.plans.block_sizes import BlockSizes

# Default chunking rule (``flash_blocks``): key blocks of up to 1,024 rows, and query chunks sized
# so one step's float32 scores, B * H * BQ * BKV * 4 bytes, stay near 8 MiB (what two CPU cores'
# caches and memory traffic handled best when measured; ``evalharness.bench.dense_cpu``).
FLASH_BLOCK_KV = 1024
FLASH_SCORE_ELEMENTS = 1 << 21
FLASH_MIN_BLOCK_Q = 64
# Chunks are multiples of 8 rows (sublane-friendly, as the XLA block-sparse path's tiles).
FLASH_MULTIPLE = 8


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _balanced(tokens: int, limit: int) -> int:
    """The smallest multiple of 8 that splits ``tokens`` into as few chunks as ``limit`` allows."""
    limit = max(FLASH_MULTIPLE, min(limit, _round_up(tokens, FLASH_MULTIPLE)))
    chunks = -(-tokens // limit)
    return _round_up(-(-tokens // chunks), FLASH_MULTIPLE)


def flash_blocks(tokens: int, batch: int, heads: int) -> BlockSizes:
    """The default (query chunk, key block) of "xla_flash" for one attention call.

    Rule: block_kv = ``FLASH_BLOCK_KV`` rows (fewer for short sequences); block_q such that
    batch * heads * block_q * block_kv is about ``FLASH_SCORE_ELEMENTS`` (8 MiB of float32
    scores per step), at least ``FLASH_MIN_BLOCK_Q``. Both are then balanced: the sequence is
    split into that many equal chunks, rounded up to a multiple of 8, so the padded query rows and
    the last key step stay small (16,128 tokens: 16 x 1,008 keys; 2,160 tokens: 3 x 720).

    Args:
        tokens: sequence length N.
        batch: B.
        heads: H.

    Returns:
        BlockSizes(block_q, block_kv), each a multiple of 8 and at most N rounded up to 8.
    """
    for name, value in (("tokens", tokens), ("batch", batch), ("heads", heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive int")
    block_kv = _balanced(tokens, FLASH_BLOCK_KV)
    rows = FLASH_SCORE_ELEMENTS // (batch * heads * block_kv)
    block_q = _balanced(tokens, max(FLASH_MIN_BLOCK_Q, rows))
    return BlockSizes(block_q, block_kv)


def _online_step(state, q_chunk, k_block, v_block):
    """One online-softmax update of a query chunk by one key block.

    Args:
        state: (running max [B,H,BQ], running sum [B,H,BQ], accumulator [B,H,BQ,D]) float32.
        q_chunk: [B,H,BQ,D], pre-scaled.
        k_block: [B,H,BKV,D].
        v_block: [B,H,BKV,D].

    Returns:
        The updated state.
    """
    m, total, acc = state
    s = jnp.einsum("bhqd,bhkd->bhqk", q_chunk, k_block, preferred_element_type=jnp.float32)
    m_new = jnp.maximum(m, s.max(axis=-1))
    alpha = jnp.exp(m - m_new)  # 0 on the first block (m = -inf); keys are never masked
    p = jnp.exp(s - m_new[..., None])
    total = alpha * total + p.sum(axis=-1)
    pv = jnp.einsum(
        "bhqk,bhkd->bhqd", p.astype(v_block.dtype), v_block, preferred_element_type=jnp.float32
    )
    return m_new, total, alpha[..., None] * acc + pv


@functools.partial(jax.jit, static_argnames=("block_q", "block_kv"))
def _flash(q, k, v, *, block_q: int, block_kv: int):
    b, n, h, d = q.shape
    nq, full = -(-n // block_q), n // block_kv
    rest = n - full * block_kv
    scaled = (q.astype(jnp.float32) / np.sqrt(d)).astype(q.dtype)
    qt = jnp.pad(
        jnp.transpose(scaled, (0, 2, 1, 3)), ((0, 0), (0, 0), (0, nq * block_q - n), (0, 0))
    )
    kt, vt = jnp.transpose(k, (0, 2, 1, 3)), jnp.transpose(v, (0, 2, 1, 3))

    def key_block(j):
        start = j * block_kv
        return (
            jax.lax.dynamic_slice_in_dim(kt, start, block_kv, axis=2),
            jax.lax.dynamic_slice_in_dim(vt, start, block_kv, axis=2),
        )

    def chunk(i):
        q_chunk = jax.lax.dynamic_slice_in_dim(qt, i * block_q, block_q, axis=2)
        state = (
            jnp.full((b, h, block_q), -jnp.inf, jnp.float32),
            jnp.zeros((b, h, block_q), jnp.float32),
            jnp.zeros((b, h, block_q, d), jnp.float32),
        )
        if full:
            state, _ = jax.lax.scan(
                lambda carry, j: (_online_step(carry, q_chunk, *key_block(j)), None),
                state,
                jax.lax.iota(jnp.int32, full),
            )
        if rest:
            state = _online_step(
                state, q_chunk, kt[:, :, full * block_kv :], vt[:, :, full * block_kv :]
            )
        _, total, acc = state
        return acc / total[..., None]

    out = jax.lax.map(chunk, jax.lax.iota(jnp.int32, nq))  # [nq, B, H, BQ, D]
    out = jnp.transpose(out, (1, 0, 3, 2, 4)).reshape(b, nq * block_q, h, d)[:, :n]
    return out.astype(q.dtype)


def flash_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, *, block_sizes: BlockSizes | None = None
) -> jax.Array:
    """Dense softmax attention by online softmax over query chunks and key blocks (XLA).

    Inputs are assumed validated by ``kernels.executors.dispatch.attention``.

    Args:
        q: [batch, tokens, heads, head_dim], float32 or bfloat16 (unscaled).
        k: [batch, tokens, heads, head_dim], same dtype.
        v: [batch, tokens, heads, head_dim], same dtype.
        block_sizes: (query chunk, key block) rows, multiples of 8 up to the sequence rounded up
            to 8; default ``flash_blocks(tokens, batch, heads)``.

    Returns:
        [batch, tokens, heads, head_dim] in q's dtype: softmax(q k^T / sqrt(head_dim)) v, with
        float32 scores, statistics and accumulator (probabilities cast to v's dtype for P V, as
        in B0).
    """
    b, n, h, _ = q.shape
    if block_sizes is None:
        block_sizes = flash_blocks(n, b, h)
    block_sizes.validate(n, "xla")
    return _flash(q, k, v, block_q=block_sizes.block_q, block_kv=block_sizes.block_kv)
