"""Cross-attention a group of heads at a time: the same values as the dense oracle, and smaller
temporaries. (Sharded tokens: ``tests/kernels/test_sp_multidevice.py``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evalharness.estimates.block_memory import block_memory
from models import transformer as transformer_module
from models.attention import cross_attention, dense_attention
from models.config import get_transformer_config


def _qkv(tokens=300, text=16, heads=6, dim=8, dtype=jnp.float32):
    kq, kk, kv = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(kq, (2, tokens, heads, dim), dtype)
    k = jax.random.normal(kk, (2, text, heads, dim), dtype)
    v = jax.random.normal(kv, (2, text, heads, dim), dtype)
    return q, k, v


def _bytes_for(heads_per_group, tokens=300, text=16):
    return heads_per_group * 2 * tokens * text * 4


@pytest.mark.parametrize("group", [1, 4, 5])  # 4 and 5 leave a remainder group of 6 heads
def test_grouped_heads_match_the_dense_oracle(group):
    q, k, v = _qkv()
    out = jax.jit(lambda q, k, v: cross_attention(q, k, v, max_score_bytes=_bytes_for(group)))(
        q, k, v
    )
    np.testing.assert_allclose(out, dense_attention(q, k, v), rtol=1e-5, atol=1e-6)


def test_bfloat16_grouped_heads_match_the_dense_oracle():
    q, k, v = _qkv(dtype=jnp.bfloat16)
    out = cross_attention(q, k, v, max_score_bytes=_bytes_for(2))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(out, np.float32),
        np.asarray(dense_attention(q, k, v), np.float32),
        rtol=2e-2,
        atol=2e-2,
    )


def test_small_problems_take_the_plain_dense_path():
    q, k, v = _qkv()
    grouped = jax.make_jaxpr(lambda q, k, v: cross_attention(q, k, v))(q, k, v)
    dense = jax.make_jaxpr(lambda q, k, v: dense_attention(q, k, v))(q, k, v)
    assert str(grouped) == str(dense)


def test_head_groups_lower_the_14b_block_temporaries_at_real_shapes(monkeypatch):
    """14B at 720p on 8 devices (9,450 tokens each, CFG batch 2): XLA's plan of two blocks holds
    most of cross-attention's 1.44 GiB of float32 scores with all heads at once, and not with
    the head groups (a standalone attention call is fused differently, so the block is measured)."""
    tcfg = get_transformer_config("wan2.1-t2v-14b")
    shape = {"batch": 2, "tokens_per_device": 9450, "dtype": "bfloat16"}
    scores = 2 * tcfg.num_attention_heads * 9450 * tcfg.text_len * 4
    block_memory.cache_clear()
    try:
        grouped = block_memory(tcfg, **shape).temp_bytes
        monkeypatch.setattr(transformer_module, "cross_attention", dense_attention)
        block_memory.cache_clear()
        all_heads = block_memory(tcfg, **shape).temp_bytes
    finally:
        block_memory.cache_clear()  # no later test may see the all-heads plan
    assert all_heads - grouped > 0.5 * scores
