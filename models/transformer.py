"""Flax NNX port of diffusers' ``WanTransformer3DModel`` (Wan 2.1 text-to-video).

Self-attention is injected (``attend``, see models/attention.py). The blocks run either unrolled
(a Python loop: each call to ``attend`` sees its block index as a Python int, and the compiled
program holds one copy of the block per layer) or scanned (``scan_layers=True``: the blocks'
parameters are stacked along a leading layer axis and one ``jax.lax.scan`` runs them, so the
program holds the block once and its compile time does not grow with depth; ``attend`` then sees
a traced int32 layer index). Both hold the same weights, drawn in the same order, and give the
same outputs. Numerics follow the reference: norms, modulation, residual updates with gates, RoPE
and softmax statistics run in float32 while matmuls run in ``dtype``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from models.attention import AttendFn, WanAttention, cross_attention, dense_attention
from models.config import WanTransformerConfig
from models.embeddings import PatchEmbed, TimeTextEmbedding
from models.layers import FeedForward, Float32LayerNorm
from models.rope import rope_tables


class WanTransformerBlock(nnx.Module):
    """Self-attention, cross-attention and FFN with timestep modulation (adaLN with gates).

    Args:
        config: model configuration.
        dtype: compute dtype.
        param_dtype: parameter dtype (``scale_shift_table`` and norms stay float32).
        rngs: initialisation randomness.
    """

    def __init__(
        self,
        config: WanTransformerConfig,
        *,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> None:
        dim, eps = config.dim, config.eps
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.dtype = dtype
        self.norm1 = Float32LayerNorm(dim, eps=eps, affine=False)
        self.attn1 = WanAttention(dim, config.num_attention_heads, eps=eps, **kw)
        self.norm2 = Float32LayerNorm(dim, eps=eps, affine=True) if config.cross_attn_norm else None
        self.attn2 = WanAttention(dim, config.num_attention_heads, eps=eps, **kw)
        self.norm3 = Float32LayerNorm(dim, eps=eps, affine=False)
        self.ffn = FeedForward(dim, config.ffn_dim, **kw)
        self.scale_shift_table = nnx.Param(
            jax.random.normal(rngs.params(), (1, 6, dim), jnp.float32) / math.sqrt(dim)
        )

    def __call__(
        self,
        x: jax.Array,
        text: jax.Array,
        modulation: jax.Array,
        rope: tuple[jax.Array, jax.Array],
        *,
        attend: AttendFn,
        step: jax.Array,
        layer: int | jax.Array,
    ) -> jax.Array:
        """Applies one block.

        Args:
            x: [B, N, dim] video tokens (compute dtype).
            text: [B, L, dim] projected text tokens.
            modulation: [B, 6, dim] timestep projection.
            rope: (cos, sin) [N, head_dim // 2].
            attend: self-attention function; its ``cross_attend`` attribute, where it has one,
                computes the cross-attention (``models.attention.cross_attention`` otherwise).
            step: denoising step for ``attend``.
            layer: this block's index for ``attend`` (a traced int32 scalar when scanned).

        Returns:
            [B, N, dim] in x.dtype.
        """
        mod = self.scale_shift_table[...] + modulation.astype(jnp.float32)  # [B, 6, dim]
        shift, scale, gate, ff_shift, ff_scale, ff_gate = (mod[:, i, None, :] for i in range(6))

        h = (self.norm1(x) * (1.0 + scale) + shift).astype(self.dtype)
        attn = self.attn1(h, rope=rope, attend=attend, step=step, layer=layer)
        x = (x.astype(jnp.float32) + attn * gate).astype(x.dtype)

        h = x if self.norm2 is None else self.norm2(x).astype(self.dtype)
        # The run's cross-attention rides on its self-attention function (one per backend, the
        # same for every arm); the model's own where the function carries none.
        cross = getattr(attend, "cross_attend", None) or cross_attention
        x = x + self.attn2(h, text, attend=cross, step=step, layer=layer).astype(x.dtype)

        h = (self.norm3(x) * (1.0 + ff_scale) + ff_shift).astype(self.dtype)
        ff = self.ffn(h)
        return (x.astype(jnp.float32) + ff.astype(jnp.float32) * ff_gate).astype(x.dtype)


class WanTransformer(nnx.Module):
    """Wan 2.1 text-to-video diffusion transformer (predicts the flow-matching velocity).

    Args:
        config: model configuration (``models.config``).
        rngs: initialisation randomness (e.g. ``nnx.Rngs(0)``).
        param_dtype: dtype of parameters (float32 islands excepted: time embedder, norms,
            scale-shift tables).
        dtype: compute dtype of matmuls and activations.
        scan_layers: run the blocks as one scanned layer over stacked parameters (``blocks`` is
            then one ``WanTransformerBlock`` whose parameters have a leading ``num_layers``
            axis); False keeps ``blocks`` a list of blocks run by a Python loop.
    """

    def __init__(
        self,
        config: WanTransformerConfig,
        *,
        rngs: nnx.Rngs,
        param_dtype: jnp.dtype = jnp.float32,
        dtype: jnp.dtype = jnp.float32,
        scan_layers: bool = False,
    ) -> None:
        self.config = config
        self.dtype = dtype
        self.scan_layers = scan_layers
        dim = config.dim
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.patch_embedding = PatchEmbed(config.in_channels, dim, config.patch_size, **kw)
        self.condition_embedder = TimeTextEmbedding(dim, config.freq_dim, config.text_dim, **kw)
        # The scanned model draws the same blocks in the same order, then stacks them, so both
        # forms of a seeded model hold the same weights.
        blocks = [WanTransformerBlock(config, **kw) for _ in range(config.num_layers)]
        self.blocks = stack_blocks(blocks) if scan_layers else nnx.List(blocks)
        self.norm_out = Float32LayerNorm(dim, eps=config.eps, affine=False)
        # The output projection accumulates and adds its bias in float32 and rounds once, as
        # torch's bfloat16 Linear does (its [B, N, 64] float32 product is small).
        self.proj_out = nnx.Linear(
            dim,
            config.out_channels * math.prod(config.patch_size),
            preferred_element_type=jnp.float32,
            **kw,
        )
        self.scale_shift_table = nnx.Param(
            jax.random.normal(rngs.params(), (1, 2, dim), jnp.float32) / math.sqrt(dim)
        )

    def _check_inputs(self, latents: jax.Array, timestep: jax.Array, context: jax.Array) -> None:
        cfg = self.config
        if latents.ndim != 5 or latents.shape[1] != cfg.in_channels:
            raise ValueError(
                f"latents shape {latents.shape}: expected [B, {cfg.in_channels}, F, H, W]"
            )
        b, _, f, h, w = latents.shape
        if any(n % p for n, p in zip((f, h, w), cfg.patch_size, strict=True)):
            raise ValueError(
                f"latent (F, H, W) = {(f, h, w)} must be divisible by patch_size {cfg.patch_size}"
            )
        if timestep.shape != (b,):
            raise ValueError(f"timestep shape {timestep.shape}: expected [B] = ({b},)")
        if context.ndim != 3 or context.shape[0] != b or context.shape[2] != cfg.text_dim:
            raise ValueError(f"context shape {context.shape}: expected [{b}, L, {cfg.text_dim}]")

    def __call__(
        self,
        latents: jax.Array,
        timestep: jax.Array,
        context: jax.Array,
        attend: AttendFn | None = None,
        step: jax.Array | int = 0,
    ) -> jax.Array:
        """Predicts the velocity for noisy latents.

        Args:
            latents: [B, C_in, F, H, W] noisy latents.
            timestep: [B] timesteps (float, 0..1000); a scalar is broadcast to [B].
            context: [B, L, text_dim] text-encoder embeddings.
            attend: self-attention function ``attend(q, k, v, *, step, layer)``; dense when None.
                If it has a ``shard_tokens`` attribute (sequence parallelism, e.g.
                ``kernels.parallel.attend``), that function ``[B, N, dim] -> [B, N, dim]`` is
                applied to the token activations from the patch embedding to the unpatchify
                (a sharding constraint: it changes placement, never values).
            step: denoising step index handed to ``attend`` (traced int32 inside the loop).

        Returns:
            [B, C_out, F, H, W] velocity in the compute dtype.

        Raises:
            ValueError: on inconsistent input shapes or a token grid beyond ``rope_max_seq_len``.
        """
        cfg = self.config
        attend = dense_attention if attend is None else attend
        timestep = jnp.asarray(timestep)
        if timestep.ndim == 0:
            timestep = jnp.broadcast_to(timestep, latents.shape[:1])
        self._check_inputs(latents, timestep, context)
        step = jnp.asarray(step, jnp.int32)

        b, _, f, h, w = latents.shape
        pt, ph, pw = cfg.patch_size
        grid = (f // pt, h // ph, w // pw)
        rope = rope_tables(grid, cfg.attention_head_dim, max_seq_len=cfg.rope_max_seq_len)

        # Optional hook of the attention function: pins where the tokens live (e.g. sharded
        # along N) so cross-attention and the FFN run on each device's own tokens.
        shard_tokens = getattr(attend, "shard_tokens", None) or (lambda t: t)
        x = shard_tokens(self.patch_embedding(latents))  # [B, N, dim]
        temb, modulation, text = self.condition_embedder(timestep, context)
        run_blocks = self._scanned_blocks if self.scan_layers else self._unrolled_blocks
        x = run_blocks(x, text, modulation, rope, attend, step, shard_tokens)

        shift_scale = self.scale_shift_table[...] + temb[:, None, :].astype(jnp.float32)
        shift, scale = shift_scale[:, 0:1], shift_scale[:, 1:2]
        x = (self.norm_out(x) * (1.0 + scale) + shift).astype(self.dtype)
        x = shard_tokens(self.proj_out(x).astype(self.dtype))  # [B, N, pt * ph * pw * C_out]

        # Unpatchify: token (f, i, j) with in-patch offset (a, c, d) → pixel (f*pt+a, i*ph+c, j*pw+d).
        x = x.reshape(b, *grid, pt, ph, pw, cfg.out_channels)
        x = x.transpose(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, cfg.out_channels, f, h, w)

    def _unrolled_blocks(self, x, text, modulation, rope, attend, step, shard_tokens) -> jax.Array:
        """The blocks one after another; ``attend`` sees each block's index as a Python int."""
        for layer, block in enumerate(self.blocks):
            x = block(x, text, modulation, rope, attend=attend, step=step, layer=layer)
            x = shard_tokens(x)
        return x

    def _scanned_blocks(self, x, text, modulation, rope, attend, step, shard_tokens) -> jax.Array:
        """One ``lax.scan`` over the stacked blocks; ``attend`` sees a traced int32 index."""
        graphdef, stacked = nnx.split(self.blocks)

        def body(x: jax.Array, layer_and_state: tuple[jax.Array, nnx.State]):
            layer, state = layer_and_state
            block = nnx.merge(graphdef, state)
            x = block(x, text, modulation, rope, attend=attend, step=step, layer=layer)
            return shard_tokens(x), None

        layers = jnp.arange(self.config.num_layers, dtype=jnp.int32)
        x, _ = jax.lax.scan(body, x, (layers, stacked))
        return x


def stack_blocks(blocks: list[WanTransformerBlock]) -> WanTransformerBlock:
    """One block whose every parameter is the given blocks' stacked along a new leading axis.

    Args:
        blocks: blocks of one architecture (concrete or abstract parameters).

    Returns:
        A ``WanTransformerBlock`` whose parameters are [len(blocks), ...]; layer i's are
        ``[i]`` of each.
    """
    graphdef, first = nnx.split(blocks[0])
    states = [first, *(nnx.split(block)[1] for block in blocks[1:])]
    return nnx.merge(graphdef, jax.tree.map(lambda *xs: jnp.stack(xs), *states))


def to_scanned(model: WanTransformer) -> WanTransformer:
    """Turns an unrolled model into the scanned form in place (its blocks stacked), e.g. after
    editing blocks one by one; a scanned model is returned unchanged.

    Args:
        model: a ``WanTransformer``.

    Returns:
        ``model`` (same object), ``scan_layers`` True.
    """
    if not model.scan_layers:
        model.blocks = stack_blocks(list(model.blocks))
        model.scan_layers = True
    return model


class _ConstantKey:
    """Stands in for ``nnx.Rngs`` while the model is built abstractly.

    Abstract values are discarded, so one fixed key serves every draw. A real ``nnx.Rngs`` bumps a
    counter variable on every draw, and under tracing flax inspects each new counter tracer in a way
    that costs time proportional to the trace so far: quadratic overall, about 25 s for the 14B
    model against under 2 s this way.
    """

    def __init__(self) -> None:
        self._key = jax.random.key(0)

    def params(self) -> jax.Array:
        return self._key


def abstract_transformer(
    config: WanTransformerConfig,
    *,
    param_dtype: jnp.dtype = jnp.float32,
    dtype: jnp.dtype = jnp.float32,
    scan_layers: bool = False,
) -> WanTransformer:
    """Builds ``WanTransformer`` with ``jax.ShapeDtypeStruct`` parameters; allocates no weights.

    Use it for shape/memory planning (``nnx.eval_shape`` of a forward pass) and as the skeleton that
    checkpoint loading fills.

    Args:
        config: model configuration.
        param_dtype: parameter dtype.
        dtype: compute dtype.
        scan_layers: build the scanned form (stacked block parameters).
    """
    return nnx.eval_shape(
        lambda: WanTransformer(
            config,
            rngs=_ConstantKey(),  # type: ignore[arg-type]
            param_dtype=param_dtype,
            dtype=dtype,
            scan_layers=scan_layers,
        )
    )
