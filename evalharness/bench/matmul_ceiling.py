"""The matmuls of a dense attention call alone, in XLA and in torch: the ceiling of a CPU control.

``xla_flash`` computes attention as two matmuls per (query chunk, key block) step with the online
softmax between them, so its time can only approach that of the bare matmuls. Timing them in XLA
and in torch (MKL on a CPU) at ``xla_flash``'s shapes separates what our executor costs from what
XLA:CPU's matmul library costs: if XLA's bare matmuls are slower than torch's whole SDPA call, no
XLA executor can match SDPA. Both compute ``sum_j (q_i k_j^T) v_j`` per query chunk i (attention's
FLOPs, a number nobody needs): for benchmarks only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from kernels.plans.block_sizes import BlockSizes


@functools.partial(jax.jit, static_argnames=("block_q", "block_kv"))
def _xla_matmuls(q, k, v, *, block_q: int, block_kv: int):
    b, n, h, d = q.shape
    nq, nkv = n // block_q, n // block_kv
    qt, kt, vt = (jnp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))

    def chunk(i):
        q_chunk = jax.lax.dynamic_slice_in_dim(qt, i * block_q, block_q, axis=2)

        def step(acc, j):
            k_block = jax.lax.dynamic_slice_in_dim(kt, j * block_kv, block_kv, axis=2)
            v_block = jax.lax.dynamic_slice_in_dim(vt, j * block_kv, block_kv, axis=2)
            s = jnp.einsum("bhqd,bhkd->bhqk", q_chunk, k_block)
            return acc + jnp.einsum("bhqk,bhkd->bhqd", s, v_block), None

        acc, _ = jax.lax.scan(step, jnp.zeros((b, h, block_q, d), q.dtype), jnp.arange(nkv))
        return acc

    return jax.lax.map(chunk, jnp.arange(nq))


def _whole_blocks(tokens: int, block_sizes: BlockSizes) -> tuple[int, int]:
    """(query chunks, key blocks) that fit in ``tokens`` whole; refuses blocks that fit none."""
    nq, nkv = tokens // block_sizes.block_q, tokens // block_sizes.block_kv
    if nq < 1 or nkv < 1:
        raise ValueError(
            f"{block_sizes} does not fit a {tokens}-token sequence; use blocks of at most "
            f"{tokens} rows"
        )
    return nq, nkv


def chunked_matmul_flops(shape: tuple[int, int, int, int], block_sizes: BlockSizes) -> float:
    """FLOPs of ``xla_chunked_matmuls`` / ``torch_chunked_matmuls`` on ``shape`` [B, N, H, D]:
    whole chunks and blocks only (a ceiling should not pay for padding), so at most attention's
    4 * B * H * N^2 * D."""
    b, n, h, d = shape
    nq, nkv = _whole_blocks(n, block_sizes)
    return 4.0 * b * h * d * (nq * block_sizes.block_q) * (nkv * block_sizes.block_kv)


def xla_chunked_matmuls(
    q: jax.Array, k: jax.Array, v: jax.Array, block_sizes: BlockSizes
) -> jax.Array:
    """The two matmuls of every (query chunk, key block) step of ``xla_flash``, in XLA.

    Args:
        q, k, v: [batch, tokens, heads, head_dim].
        block_sizes: (query chunk, key block) rows, as ``xla_flash`` would use them.

    Returns:
        [query chunks, batch, heads, block_q, head_dim]: sum over key blocks of (q k^T) v.
    """
    _whole_blocks(q.shape[1], block_sizes)
    return _xla_matmuls(q, k, v, block_q=block_sizes.block_q, block_kv=block_sizes.block_kv)


def torch_chunked_matmuls(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, block_sizes: BlockSizes
) -> Callable[[], object]:
    """The same matmuls in torch (MKL on an x86 CPU, its default thread count), as a
    zero-argument callable returning the accumulators.

    Args:
        q, k, v: [batch, tokens, heads, head_dim] host arrays.
        block_sizes: (query chunk, key block) rows.

    Raises:
        ImportError: torch is not installed.
    """
    import torch

    nq, nkv = _whole_blocks(q.shape[1], block_sizes)
    bq, bkv = block_sizes.block_q, block_sizes.block_kv
    tq, tk, tv = (torch.from_numpy(np.array(x)).transpose(1, 2).contiguous() for x in (q, k, v))
    k_t = [tk[:, :, j * bkv : (j + 1) * bkv].transpose(-1, -2).contiguous() for j in range(nkv)]
    v_b = [tv[:, :, j * bkv : (j + 1) * bkv] for j in range(nkv)]

    def call():
        with torch.no_grad():
            out = []
            for i in range(nq):
                q_chunk = tq[:, :, i * bq : (i + 1) * bq]
                acc = torch.zeros(q_chunk.shape, dtype=q_chunk.dtype)
                for kt_j, v_j in zip(k_t, v_b, strict=True):
                    acc += (q_chunk @ kt_j) @ v_j
                out.append(acc)
            return out

    return call
