"""The matmul ceiling of the CPU dense-control benchmark: what it computes and refuses."""

import jax
import numpy as np
import pytest

from evalharness.bench.matmul_ceiling import (
    chunked_matmul_flops,
    torch_chunked_matmuls,
    xla_chunked_matmuls,
)
from kernels.plans.block_sizes import BlockSizes

SHAPE = (
    2,
    40,
    3,
    8,
)  # [B, N, H, D]; 40 tokens: two 16-row query chunks and the ragged rest left out


def _qkv():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3))


def _numpy_oracle(q, k, v, bs: BlockSizes) -> np.ndarray:
    """sum over whole key blocks of (q_i k_j^T) v_j per whole query chunk, in float64."""
    q, k, v = (np.transpose(x, (0, 2, 1, 3)).astype(np.float64) for x in (q, k, v))
    nq, nkv = SHAPE[1] // bs.block_q, SHAPE[1] // bs.block_kv
    keys = nkv * bs.block_kv
    scores = q[:, :, : nq * bs.block_q] @ np.swapaxes(k[:, :, :keys], -1, -2)
    out = scores @ v[:, :, :keys]  # [B, H, nq * BQ, D]
    b, h, _, d = out.shape
    return np.transpose(out.reshape(b, h, nq, bs.block_q, d), (2, 0, 1, 3, 4))


def test_xla_chunked_matmuls_equal_the_oracle():
    q, k, v = _qkv()
    bs = BlockSizes(16, 24)
    got = np.asarray(jax.jit(lambda q, k, v: xla_chunked_matmuls(q, k, v, bs))(q, k, v))
    want = _numpy_oracle(q, k, v, bs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_torch_chunked_matmuls_equal_the_oracle():
    pytest.importorskip("torch")
    q, k, v = _qkv()
    bs = BlockSizes(16, 24)
    got = np.stack([x.numpy() for x in torch_chunked_matmuls(q, k, v, bs)()])
    want = _numpy_oracle(q, k, v, bs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_flops_count_whole_chunks_only():
    # 2 x 16 query rows and 1 x 24 keys of 40 tokens: 4 * B * H * D * 32 * 24.
    assert chunked_matmul_flops(SHAPE, BlockSizes(16, 24)) == 4.0 * 2 * 3 * 8 * 32 * 24
    assert chunked_matmul_flops(SHAPE, BlockSizes(40, 40)) == 4.0 * 2 * 3 * 8 * 40 * 40


def test_blocks_longer_than_the_sequence_are_refused_with_the_limit():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="at most 40 rows"):
        xla_chunked_matmuls(q, k, v, BlockSizes(48, 8))
    with pytest.raises(ValueError, match="at most 40 rows"):
        chunked_matmul_flops(SHAPE, BlockSizes(8, 48))
