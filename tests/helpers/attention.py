"""Inputs and the oracle check shared by the Pallas kernel tests (TPU and GPU, interpret mode)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from kernels.executors.reference import reference_attention
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from tests.helpers.numerics import assert_allclose

# float32 on both sides at HIGHEST precision; the online softmax reorders the sums, so the error
# follows float32 rounding of O(1) outputs: a small rtol plus atol.
F32_TOL = {"atol": 1e-5, "rtol": 2e-5}
# bfloat16 inputs and probabilities (8 significant bits) against a float32-accumulated oracle.
BF16_TOL = {"atol": 2e-2, "rtol": 2e-2}

# The project oracle, jitted once per (shape, mask): eager dispatch of its ops costs more CPU than
# an interpreted kernel at these sizes.
oracle = jax.jit(reference_attention, static_argnums=3)


def numpy_qkv(seed: int, batch: int, tokens: int, heads: int, head_dim: int, dtype):
    """q, k, v [batch, tokens, heads, head_dim] of standard normals in ``dtype``.

    NumPy draws: no per-shape compilation of a jax.random program.
    """
    rng = np.random.default_rng(seed)
    shape = (batch, tokens, heads, head_dim)
    return tuple(
        jnp.asarray(rng.standard_normal(shape, np.float32).astype(jnp.dtype(dtype)))
        for _ in range(3)
    )


def check_against_oracle(out, q, k, v, mask) -> None:
    """``out`` is the dense masked oracle's result (``mask`` None: dense), finite, in q's dtype."""
    expected = oracle(q, k, v, mask)
    assert out.dtype == q.dtype
    assert out.shape == q.shape
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32))))
    assert_allclose(out, expected, **(F32_TOL if q.dtype == jnp.float32 else BF16_TOL))


# The parameters of one kernel-against-oracle case, for ``pytest.mark.parametrize``.
ORACLE_CASE_ARGS = "variant, tokens, half_width, sink, block_q, block_kv, head_dim, dtype"
# The masks both Pallas kernels are checked on (band-only and band+sink, padded and unpadded
# lengths, both head dims, both dtypes), each with the tiles (block_q, block_kv) it runs at on
# TPU (key tiles of 128, the lane width) and on GPU (tiles from 16 to 128).
_ORACLE_MASKS = [
    # variant, tokens, half_width, sink, head_dim, dtype, TPU tiles, GPU tiles
    ("b0", 300, 0, 0, 64, jnp.float32, (64, 128), (64, 64)),
    ("b1", 500, 90, 60, 64, jnp.float32, (64, 128), (64, 32)),
    ("b2", 512, 150, 0, 128, jnp.float32, (128, 128), (128, 64)),
    ("b2", 520, 200, 100, 64, jnp.float32, (64, 128), (32, 128)),
    ("b3", 600, 180, 64, 128, jnp.float32, (128, 128), (128, 64)),
    ("b2", 384, 120, 40, 128, jnp.bfloat16, (64, 128), (64, 64)),
    ("b3", 450, 140, 0, 64, jnp.bfloat16, (64, 128), (16, 16)),
]


def oracle_cases(platform: str) -> list[tuple]:
    """The kernel-against-oracle cases (``ORACLE_CASE_ARGS`` order) at ``platform``'s tiles.

    Args:
        platform: "tpu" or "gpu".
    """
    column = {"tpu": 6, "gpu": 7}[platform]
    return [(*case[:4], *case[column], *case[4:6]) for case in _ORACLE_MASKS]


def oracle_case_ids(cases) -> list[str]:
    """Readable test ids of ``ORACLE_CASE_ARGS`` tuples."""
    return [
        f"{c[0]}-n{c[1]}-w{c[2]}-s{c[3]}-{c[4]}x{c[5]}-d{c[6]}-{jnp.dtype(c[7]).name}"
        for c in cases
    ]


def check_kernel_case(kernel, mask, variant, block_q, block_kv, head_dim, dtype) -> None:
    """Plans ``mask`` with exact tiles (no rounding limit), runs ``kernel`` in interpret mode on
    seeded inputs (batch 2, 3 heads) and checks it against the oracle on the plan's logical mask
    (the band for b1/b2, all pairs for b0, the tile-rounded band for b3)."""
    plan = build_plan(mask, BlockSizes(block_q, block_kv), variant, rounding_tolerance=None)
    q, k, v = numpy_qkv(0, 2, mask.tokens, 3, head_dim, dtype)
    out = kernel(q, k, v, plan, variant=variant, interpret=True)
    check_against_oracle(out, q, k, v, plan.logical_mask)
