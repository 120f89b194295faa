"""The Pallas TPU kernels' softmaxes on large logits (interpret mode): cross-attention, routing's
sampled outputs and the block-sparse band kernel.

float32's ``exp`` overflows past log(float32 max) = 88.72, so a softmax that does not subtract its
row's maximum turns every output into inf / inf = NaN once one score passes it. The kernels'
other tests draw scores of a few units (under 16), where such a softmax is exact; here q is
scaled so that the scores are 30 and 100 times a standard normal's, and one key dominates every
query by about 400. The reference is ``models.attention.dense_attention`` (float32 scores and
``jax.nn.softmax``), over every key: each kernel is run where its mask keeps every pair.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.executors.pallas_tpu import pallas_blocksparse_attention
from kernels.executors.pallas_tpu_cross import pallas_cross_attention
from kernels.executors.pallas_tpu_routing import pallas_sampled_outputs
from kernels.masks.band import BandMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from models.attention import dense_attention

EXP_OVERFLOW = float(np.log(np.finfo(np.float32).max))  # 88.72
BATCH, HEADS, HEAD_DIM = 1, 2, 64
# Query and key counts per kernel: every one ragged against its tiles (the last key tile of the
# routing and band kernels runs past the keys, the cross kernel's last query tile past the rows).
SHAPES = {"cross": (40, 24), "routing": (24, 200), "band": (200, 200)}


def _cross(q, k, v) -> list:
    return [pallas_cross_attention(q, k, v, block_q=16, interpret=True)]


def _routing(q, k, v) -> list:
    """The three sampled outputs, each [B, R, H, D]; both masks keep every pair, so each is the
    attention over every key."""
    keep = jnp.ones((q.shape[1], k.shape[1]), bool)
    outputs = pallas_sampled_outputs(q, k, v, keep, keep, block_kv=128, interpret=True)
    return [jnp.swapaxes(out, 1, 2) for out in outputs]


def _band(q, k, v) -> list:
    """b0 (every tile) and b2 with a band as wide as the sequence: full tiles, and partial ones
    (the ragged last key tile) whose masked scores are replaced in-kernel."""
    tokens = q.shape[1]
    b0 = build_plan(BandMask(tokens, 0, 0), BlockSizes(64, 128), "b0")
    b2 = build_plan(BandMask(tokens, tokens, 0), BlockSizes(64, 128), "b2")
    return [
        pallas_blocksparse_attention(q, k, v, b0, variant="b0", interpret=True),
        pallas_blocksparse_attention(q, k, v, b2, variant="b2", interpret=True),
    ]


KERNELS = {"cross": _cross, "routing": _routing, "band": _band}


def _inputs(kernel: str, dtype, seed: int = 0):
    """q, k, v [1, tokens, 2, 64] of standard normals in float32 (q's scores then have standard
    deviation 1), and the key count."""
    rows, keys = SHAPES[kernel]
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((BATCH, n, HEADS, HEAD_DIM), np.float32) for n in (rows, keys, keys)
    )
    return q, k, v


def _scores(q, k) -> np.ndarray:
    """q k^T / sqrt(D) in float64, [B, H, Nq, Nk]."""
    q, k = (np.asarray(x, np.float64) for x in (q, k))
    return np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("scale", [30.0, 100.0], ids=["x30", "x100"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_scaled_logits_give_dense_attentions_finite_outputs(kernel, scale, dtype):
    q, k, v = _inputs(kernel, dtype)
    q, k, v = (jnp.asarray(x).astype(dtype) for x in (q * scale, k, v))
    assert np.max(_scores(q, k)) > EXP_OVERFLOW  # exp of the raw scores would overflow
    want = np.asarray(dense_attention(q, k, v), np.float32)
    assert np.isfinite(want).all()
    # Near one-hot rows: a score of magnitude S carries float32 rounding of about S * 2^-24 per
    # term, relative to the softmax weights; bfloat16 rounds the probabilities (2^-8) and the
    # reference's output (2^-8) as well. Relative to the largest |v|.
    rel = 1e-4 if dtype == jnp.float32 else 2e-2
    for got in KERNELS[kernel](q, k, v):
        got = np.asarray(got, np.float32)
        assert got.shape == want.shape
        assert np.isfinite(got).all(), f"{np.isnan(got).sum()} NaN outputs"
        np.testing.assert_allclose(got, want, rtol=0, atol=rel * float(np.max(np.abs(v))))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_one_dominant_key_gives_its_value_row(kernel, dtype):
    """The last key (in the ragged last tile) scores about 400 above every other key for every
    query: the others' weights exp(-390) are 0 in float32, so each output is that key's v row,
    exactly."""
    q, k, v = _inputs(kernel, dtype, seed=1)
    key = k.shape[1] - 1
    # Channel 0 carries the dominance: 16 in every query, 25 sqrt(D) in the key, 0 in the rest.
    q[..., 0] = 16.0
    k[..., 0] = 0.0
    k[:, key, :, 0] = 25.0 * np.sqrt(HEAD_DIM)
    q, k, v = (jnp.asarray(x).astype(dtype) for x in (q, k, v))
    scores = _scores(q, k)
    others = np.delete(scores, key, axis=-1)
    assert np.min(scores[..., key]) - np.max(others) > 380 and np.max(scores) > EXP_OVERFLOW
    want = np.broadcast_to(np.asarray(v[:, key : key + 1], np.float32), q.shape)
    np.testing.assert_array_equal(np.asarray(dense_attention(q, k, v), np.float32), want)
    for got in KERNELS[kernel](q, k, v):
        np.testing.assert_array_equal(np.asarray(got, np.float32), want)
