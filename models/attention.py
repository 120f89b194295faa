"""Attention of the Wan transformer: the injected-attention contract, its dense reference, and the
projection module shared by self- and cross-attention.

Contract (docs/architecture.md): ``attend(q, k, v, *, step, layer) -> out`` with q, k, v, out shaped
[B, N, H, D], tokens frame-major, q/k after RMSNorm and RoPE; the function applies 1/sqrt(D) itself.
"""

from __future__ import annotations

import math
from typing import Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from models.layers import RMSNorm
from models.rope import apply_rope


class AttendFn(Protocol):
    """Self-attention function injected into the transformer (and driven by the denoising loop).

    The one contract every attention function follows, dense or sparse (``kernels.policy`` builds
    them): q, k, v and the output are [batch, tokens, heads, head_dim] in frame-major token order,
    q unscaled; ``step`` is the denoising step (a traced int32 scalar inside the loop) and ``layer``
    the block index (a Python int in an unrolled model, a traced int32 scalar in a scanned one).
    """

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        *,
        step: jax.Array | int,
        layer: int | jax.Array,
    ) -> jax.Array: ...


def dense_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    step: jax.Array | int | None = None,
    layer: int | jax.Array | None = None,
) -> jax.Array:
    """Plain softmax(q k^T / sqrt(D)) v with float32 scores and softmax; the reference oracle.

    Materialises the [B, H, Nq, Nk] score matrix, so it is for tests and short sequences.

    Args:
        q: [B, Nq, H, D] queries.
        k: [B, Nk, H, D] keys.
        v: [B, Nk, H, D] values.
        step: denoising step (unused; part of the contract).
        layer: block index (unused; part of the contract).

    Returns:
        [B, Nq, H, D] in q.dtype.
    """
    del step, layer
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum(
        "bhqk,bkhd->bqhd", probs.astype(v.dtype), v, preferred_element_type=jnp.float32
    )
    return out.astype(q.dtype)


# Cross-attention's float32 scores [B, H, N, L] grow with the video: 5.8 GiB per device for 14B at
# 1440p on 8 chips (37,800 tokens each, CFG batch 2, 512 text tokens), the largest temporary of
# a block. Computing a few heads at a time bounds them; each head's result is unchanged.
CROSS_ATTENTION_SCORE_BYTES = 512 * 2**20


def cross_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    step: jax.Array | int | None = None,
    layer: int | jax.Array | None = None,
    max_score_bytes: int = CROSS_ATTENTION_SCORE_BYTES,
) -> jax.Array:
    """:func:`dense_attention` over a short key sequence (the text), a group of heads at a time
    when all heads' float32 scores would exceed ``max_score_bytes``.

    The groups run one after another (``lax.map`` over the head axis), so only one group's scores
    are live. Heads are the axis to split because the token axis may be sharded (sequence
    parallelism): every group still sees each device's own tokens and all text tokens.

    Args:
        q: [B, Nq, H, D] queries.
        k: [B, Nk, H, D] keys.
        v: [B, Nk, H, D] values.
        step: denoising step (unused; part of the contract).
        layer: block index (unused; part of the contract).
        max_score_bytes: bound on the float32 scores one group materialises.

    Returns:
        [B, Nq, H, D] in q.dtype, equal to ``dense_attention(q, k, v)`` head by head.
    """
    del step, layer
    b, nq, heads, _ = q.shape
    per_head = b * nq * k.shape[1] * 4
    group = max(1, max_score_bytes // per_head)
    if group >= heads:
        return dense_attention(q, k, v)

    def one_head(qkv: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
        qh, kh, vh = (t[:, :, None, :] for t in qkv)  # [B, N, 1, D]
        return dense_attention(qh, kh, vh)[:, :, 0, :]

    # [H, B, N, D] so that lax.map walks the heads; batch_size runs `group` heads per iteration
    # (vmapped) and the remainder in one more.
    by_head = tuple(jnp.moveaxis(t, 2, 0) for t in (q, k, v))
    out = jax.lax.map(one_head, by_head, batch_size=group)
    return jnp.moveaxis(out, 0, 2)


class WanAttention(nnx.Module):
    """q/k/v/out projections with RMSNorm across heads on q and k (diffusers' ``WanAttention``).

    Args:
        dim: model width (= heads * head_dim).
        num_heads: attention heads H.
        eps: RMSNorm epsilon.
        dtype: compute dtype.
        param_dtype: parameter dtype.
        rngs: initialisation randomness.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        eps: float,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> None:
        self.num_heads = num_heads
        self.dtype = dtype
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.to_q = nnx.Linear(dim, dim, **kw)
        self.to_k = nnx.Linear(dim, dim, **kw)
        self.to_v = nnx.Linear(dim, dim, **kw)
        self.to_out = nnx.Linear(dim, dim, **kw)
        self.norm_q = RMSNorm(dim, eps=eps, param_dtype=param_dtype)
        self.norm_k = RMSNorm(dim, eps=eps, param_dtype=param_dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        """[B, N, H * D] → [B, N, H, D]."""
        return x.reshape(*x.shape[:2], self.num_heads, -1)

    def __call__(
        self,
        x: jax.Array,
        context: jax.Array | None = None,
        *,
        rope: tuple[jax.Array, jax.Array] | None = None,
        attend: AttendFn = dense_attention,
        step: jax.Array | int = 0,
        layer: int | jax.Array = 0,
    ) -> jax.Array:
        """Attends from ``x`` to ``context`` (cross-attention) or to itself (self-attention).

        Args:
            x: [B, N, dim] queries' source.
            context: [B, L, dim] keys'/values' source; None for self-attention.
            rope: (cos, sin) [N, D // 2] applied to q and k; None for no rotation.
            attend: attention function following the contract.
            step: denoising step passed to ``attend``.
            layer: block index passed to ``attend``.

        Returns:
            [B, N, dim] in the compute dtype.

        Raises:
            ValueError: if ``attend`` returns a shape other than q's.
        """
        source = x if context is None else context
        q = self._heads(self.norm_q(self.to_q(x)))
        k = self._heads(self.norm_k(self.to_k(source)))
        v = self._heads(self.to_v(source))
        if rope is not None:
            q = apply_rope(q, *rope)
            k = apply_rope(k, *rope)
        out = attend(q, k, v, step=step, layer=layer)
        if out.shape != q.shape:
            where = f"at layer {layer}" if isinstance(layer, int) else "in the scanned blocks"
            raise ValueError(
                f"attend returned shape {out.shape} {where}; it must return q's shape "
                f"{q.shape} [B, N, H, D]"
            )
        return self.to_out(out.reshape(*x.shape[:2], -1).astype(self.dtype))
