"""The Pallas TPU cross-attention (interpret mode) against the model's own, and the rule that
hands it to the transformer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kernels.executors.pallas_tpu_cross import cross_attend_for, pallas_cross_attention
from kernels.masks.geometry import TokenGeometry
from kernels.policy.attention_policy import AttentionPolicy, make_dense_attend
from models.accelerator_env import libtpu_installed
from models.attention import cross_attention, dense_attention
from models.config import WanTransformerConfig
from models.transformer import WanTransformerBlock
from tests.helpers.schedules import load_schedule
from tests.helpers.wan_block import compiled_for_v5e, wan13b_block_480p


def _qkv(batch, tokens, heads, head_dim, length, dtype, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(keys[0], (batch, tokens, heads, head_dim), jnp.float32) * 2.0
    k = jax.random.normal(keys[1], (batch, length, heads, head_dim), jnp.float32) * 2.0
    v = jax.random.normal(keys[2], (batch, length, heads, head_dim), jnp.float32)
    return tuple(x.astype(dtype) for x in (q, k, v))


def _close(got, want, rel):
    got, want = (np.asarray(x, np.float32) for x in (got, want))
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * scale)


@pytest.mark.parametrize(
    ("head_dim", "tokens", "block_q"),
    [(128, 300, 64), (128, 64, 1024), (64, 300, 128), (32, 17, 16)],
    ids=["in-place-ragged", "in-place-one-tile", "heads-leading-ragged", "heads-leading-tiny"],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_equals_the_models_dense_attention(head_dim, tokens, block_q, dtype):
    q, k, v = _qkv(2, tokens, 3, head_dim, 40, dtype)
    got = pallas_cross_attention(q, k, v, block_q=block_q, interpret=True)
    assert got.shape == q.shape and got.dtype == q.dtype
    # float32: summation order only; bfloat16: one rounding of the probabilities and the output.
    _close(got, dense_attention(q, k, v), 1e-5 if dtype == jnp.float32 else 2e-2)


def test_heads_are_not_mixed():
    """Each head's output depends on that head's q, k, v only (the in-place lane runs)."""
    q, k, v = _qkv(1, 48, 2, 128, 16, jnp.float32)
    base = pallas_cross_attention(q, k, v, block_q=16, interpret=True)
    moved = pallas_cross_attention(q, k.at[:, :, 1].multiply(3.0), v, block_q=16, interpret=True)
    np.testing.assert_array_equal(np.asarray(base[:, :, 0]), np.asarray(moved[:, :, 0]))
    assert not np.allclose(np.asarray(base[:, :, 1]), np.asarray(moved[:, :, 1]))


def test_refuses_mismatched_shapes_and_tiles():
    q, k, v = _qkv(1, 32, 2, 128, 16, jnp.float32)
    with pytest.raises(ValueError, match=r"\[B, L, H, D\]"):
        pallas_cross_attention(q, k[:, :, :1], v[:, :, :1], interpret=True)
    with pytest.raises(ValueError, match="multiple of 16"):
        pallas_cross_attention(q, k, v, block_q=24, interpret=True)


def test_only_pallas_tpu_runs_it():
    for backend in ("xla", "pallas_gpu", "reference"):
        assert cross_attend_for(backend) is None
        assert not hasattr(make_dense_attend("reference", backend=backend), "cross_attend")
    assert cross_attend_for("pallas_tpu") is not None
    geometry = TokenGeometry(frames=2, height=4, width=8)
    dense = AttentionPolicy(load_schedule("dense"), geometry, num_steps=2, num_layers=1)
    assert dense.cross_attend is None
    tpu = AttentionPolicy(
        load_schedule("dense"), geometry, num_steps=2, num_layers=1, backend="pallas_tpu"
    )
    assert tpu.cross_attend is not None


def _block_and_inputs():
    config = WanTransformerConfig(
        num_layers=1, num_attention_heads=1, attention_head_dim=128, ffn_dim=32, text_dim=16
    )
    block = WanTransformerBlock(
        config, dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    keys = jax.random.split(jax.random.key(1), 3)
    x = jax.random.normal(keys[0], (1, 16, config.dim))
    text = jax.random.normal(keys[1], (1, 8, config.dim))
    modulation = jax.random.normal(keys[2], (1, 6, config.dim)) * 0.1
    half = config.attention_head_dim // 2
    rope = (jnp.ones((16, half)), jnp.zeros((16, half)))
    return block, (x, text, modulation, rope)


def test_the_block_runs_the_cross_attention_its_attend_carries():
    block, args = _block_and_inputs()

    def attend(q, k, v, *, step, layer):
        return dense_attention(q, k, v)

    def run(attend):
        return np.asarray(jax.jit(lambda *a: block(*a, attend=attend, step=0, layer=0))(*args))

    own = run(attend)
    attend.cross_attend = lambda q, k, v, **_: jnp.zeros_like(q)  # proves which one ran
    assert not np.allclose(run(attend), own)
    attend.cross_attend = cross_attention  # the model's own, carried: the same block
    np.testing.assert_array_equal(run(attend), own)


def test_the_models_own_is_the_oracle_it_replaces():
    """Where no attend carries one, the block's cross-attention is the model's own, itself
    ``dense_attention`` head by head."""
    q, k, v = _qkv(2, 40, 2, 128, 8, jnp.float32)
    small = cross_attention(q, k, v, max_score_bytes=2 * 40 * 8 * 4)  # one head at a time
    _close(small, dense_attention(q, k, v), 1e-6)


@pytest.mark.slow  # libtpu compiles two Wan 1.3B blocks at 480p for v5e: about 20 s
@pytest.mark.skipif(not libtpu_installed(), reason="needs libtpu: pip install -e '.[tpu]'")
def test_in_a_wan_block_compiled_for_v5e_it_replaces_the_head_loop_and_its_traffic():
    """Wan 1.3B's block at 480p (32,760 tokens, 512 text tokens, bf16), compiled for a TPU v5e
    from this CPU with a free self-attention: with the run's cross-attention the model's loop over
    head groups is gone and XLA's count of the bytes the block moves falls (its float32 scores
    no longer go through HBM)."""
    block = wan13b_block_480p()

    def compiled(cross):
        def free(q, k, v, **_):
            return v

        if cross is not None:
            free.cross_attend = cross
        return compiled_for_v5e(block, free)

    own_text, own_bytes = compiled(None)
    run_text, run_bytes = compiled(cross_attend_for("pallas_tpu"))
    assert " while(" in own_text and " while(" not in run_text
    assert "cross_attention" in run_text
    scores_bytes = 2 * 12 * block.tokens * 512 * 4  # the model's float32 scores, written once
    assert run_bytes < own_bytes - scores_bytes


@pytest.mark.tpu
@pytest.mark.parametrize("head_dim", [128, 64])
def test_compiled_on_tpu(head_dim):
    """The kernel compiled by Mosaic (run with JAX_PLATFORMS=tpu on a TPU host): a ragged last
    query tile, bfloat16, against the model's own."""
    if jax.default_backend() != "tpu":
        pytest.skip("needs a TPU backend")
    q, k, v = _qkv(2, 2000, 4, head_dim, 512, jnp.bfloat16)
    got = jax.jit(pallas_cross_attention)(q, k, v)
    _close(got, dense_attention(q, k, v), 2e-2)
