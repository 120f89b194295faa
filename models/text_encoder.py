"""UMT5 encoder (the Wan 2.1 text encoder) in Flax NNX, loaded from a transformers ``text_encoder/``.

Architecture (transformers ``UMT5EncoderModel``): token embedding; per block a pre-norm self-attention
with its **own** relative-position bias (UMT5, unlike T5, gives every layer a bias table) and no
``1/sqrt(d)`` scaling, then a pre-norm gated-GELU feed-forward (``act(x·wi_0) ⊙ (x·wi_1) · wo``);
a final norm. Norms are T5 RMSNorm: ``x · rsqrt(mean(x²) + eps) · weight``, no mean subtraction,
computed in float32. Parameter names and shapes are the transformers ones (``q.weight`` is
``[inner, d_model]``), so a checkpoint loads by name.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from models.safetensors_reader import (
    WeightsError,
    find_weight_files,
    load_torch_layout,
    read_json,
    save_torch_layout,
)
from models.seeded_init import seeded_normal

_ACTIVATIONS = {
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "relu": jax.nn.relu,
}


@dataclasses.dataclass(frozen=True)
class UMT5Config:
    """The ``text_encoder/config.json`` fields the encoder needs (transformers ``UMT5Config`` names).

    UMT5-XXL (Wan 2.1): vocab 256384, d_model 4096, d_kv 64, d_ff 10240, 24 layers, 64 heads.
    """

    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_heads: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    dense_act_fn: str = "gelu_new"
    is_gated_act: bool = True

    def __post_init__(self):
        if self.dense_act_fn not in _ACTIVATIONS:
            raise ValueError(
                f"dense_act_fn={self.dense_act_fn!r} is not supported; use one of {sorted(_ACTIVATIONS)}"
            )

    @classmethod
    def from_dict(cls, raw: dict, *, source: str = "config") -> UMT5Config:
        """Builds the config from a transformers config dict (``feed_forward_proj`` decides the FFN).

        Raises:
            ValueError: a missing required field or an unsupported activation.
        """
        kwargs = {f.name: raw[f.name] for f in dataclasses.fields(cls) if f.name in raw}
        proj = raw.get("feed_forward_proj")
        if proj is not None:
            parts = proj.split("-")
            kwargs["is_gated_act"] = parts[0] == "gated"
            act = parts[-1]
            # transformers maps "gated-gelu" to gelu_new (the tanh approximation).
            kwargs["dense_act_fn"] = "gelu_new" if act == "gelu" else act
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.name not in kwargs
        ]
        if missing:
            raise ValueError(f"{source} lacks required UMT5 fields {missing}")
        return cls(**kwargs)


def _init(rngs: nnx.Rngs, shape: tuple[int, ...], fan_in: int, dtype) -> jax.Array:
    return seeded_normal(rngs, shape, 1.0 / math.sqrt(fan_in), dtype)


class TorchLinear(nnx.Module):
    """Bias-free linear layer with a torch-layout weight ``[out, in]``."""

    def __init__(self, in_features: int, out_features: int, *, rngs: nnx.Rngs, param_dtype):
        self.weight = nnx.Param(_init(rngs, (out_features, in_features), in_features, param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[..., in]`` → ``[..., out]``."""
        return jnp.einsum("...i,oi->...o", x, self.weight[...].astype(x.dtype))


class Embedding(nnx.Module):
    """Token table ``weight [vocab, d_model]``."""

    def __init__(self, vocab: int, dim: int, *, rngs: nnx.Rngs, param_dtype):
        self.weight = nnx.Param(seeded_normal(rngs, (vocab, dim), 1.0, param_dtype))

    def __call__(self, ids: jax.Array) -> jax.Array:
        """ids: ``[B, L]`` int → ``[B, L, dim]``."""
        return jnp.take(self.weight[...], ids, axis=0)


class T5RMSNorm(nnx.Module):
    """Scale-only RMSNorm in float32, cast back to the weight dtype as transformers does."""

    def __init__(self, dim: int, eps: float, *, param_dtype):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        """x: ``[..., dim]`` → same shape, weight dtype."""
        x32 = x.astype(jnp.float32)
        variance = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        y = (x32 * jax.lax.rsqrt(variance + self.eps)).astype(self.weight.dtype)
        return self.weight[...] * y


def relative_position_bucket(
    relative_position: jax.Array, num_buckets: int, max_distance: int
) -> jax.Array:
    """Bidirectional T5 bucket of ``key_pos - query_pos``.

    Half the buckets per direction; within a direction the first half are exact distances, the rest
    logarithmic up to ``max_distance`` (then saturating).

    Args:
        relative_position: int array of ``memory_position - context_position``.
        num_buckets: total buckets (both directions).
        max_distance: distance where the log buckets saturate.

    Returns:
        int32 bucket ids, same shape.
    """
    half = num_buckets // 2
    bucket = (relative_position > 0).astype(jnp.int32) * half
    distance = jnp.abs(relative_position)
    max_exact = half // 2
    is_small = distance < max_exact
    # Clamp to 1 before the log so exact (small) distances never produce -inf; they are masked anyway.
    safe = jnp.maximum(distance, 1).astype(jnp.float32)
    log_ratio = jnp.log(safe / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (half - max_exact)).astype(jnp.int32)
    large = jnp.minimum(large, half - 1)
    return bucket + jnp.where(is_small, distance, large)


class SelfAttention(nnx.Module):
    """UMT5 self-attention with this layer's relative-position bias and no score scaling."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        inner = config.num_heads * config.d_kv
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        self.q = TorchLinear(config.d_model, inner, **kw)
        self.k = TorchLinear(config.d_model, inner, **kw)
        self.v = TorchLinear(config.d_model, inner, **kw)
        self.o = TorchLinear(inner, config.d_model, **kw)
        self.relative_attention_bias = Embedding(
            config.relative_attention_num_buckets, config.num_heads, **kw
        )
        self.num_heads = config.num_heads
        self.d_kv = config.d_kv
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance

    def position_bias(self, length: int) -> jax.Array:
        """``[1, heads, L, L]`` bias from the bucketed ``key - query`` distance."""
        pos = jnp.arange(length)
        buckets = relative_position_bucket(
            pos[None, :] - pos[:, None], self.num_buckets, self.max_distance
        )
        return jnp.transpose(self.relative_attention_bias(buckets), (2, 0, 1))[None]

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """x: ``[B, L, d_model]``; mask: ``[B, L]`` (1 = real token) → ``[B, L, d_model]``."""
        b, length, _ = x.shape

        def heads(t):
            return t.reshape(b, length, self.num_heads, self.d_kv)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        # Scores accumulate and stay in float32 (the reference's SDPA does, and UMT5 does not scale
        # them: logits of tens would lose whole units if rounded to bfloat16 first).
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
        scores = scores + self.position_bias(length).astype(jnp.float32)
        # Padded keys get the dtype minimum (transformers' additive mask); padded queries still
        # attend to the real keys, their outputs are zeroed later by the prompt encoder.
        scores = jnp.where(mask[:, None, None, :] > 0, scores, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, length, -1)
        return self.o(out)


class LayerSelfAttention(nnx.Module):
    """Pre-norm residual self-attention (``layer.0``)."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        self.SelfAttention = SelfAttention(config, rngs=rngs, param_dtype=param_dtype)
        self.layer_norm = T5RMSNorm(
            config.d_model, config.layer_norm_epsilon, param_dtype=param_dtype
        )

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` → same."""
        return x + self.SelfAttention(self.layer_norm(x), mask)


class DenseGatedActDense(nnx.Module):
    """``wo(act(wi_0 x) ⊙ wi_1 x)`` (gated) or ``wo(act(wi x))``."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        kw = dict(rngs=rngs, param_dtype=param_dtype)
        self.gated = config.is_gated_act
        if self.gated:
            self.wi_0 = TorchLinear(config.d_model, config.d_ff, **kw)
            self.wi_1 = TorchLinear(config.d_model, config.d_ff, **kw)
        else:
            self.wi = TorchLinear(config.d_model, config.d_ff, **kw)
        self.wo = TorchLinear(config.d_ff, config.d_model, **kw)
        self.act = _ACTIVATIONS[config.dense_act_fn]

    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` → same."""
        # The activation (and the gate product) in float32, rounded once to the compute dtype: XLA on
        # CPU would otherwise round every op of the tanh formula to bfloat16.
        if self.gated:
            h = self.act(self.wi_0(x).astype(jnp.float32)) * self.wi_1(x).astype(jnp.float32)
        else:
            h = self.act(self.wi(x).astype(jnp.float32))
        return self.wo(h.astype(x.dtype))


class LayerFF(nnx.Module):
    """Pre-norm residual feed-forward (``layer.1``)."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        self.DenseReluDense = DenseGatedActDense(config, rngs=rngs, param_dtype=param_dtype)
        self.layer_norm = T5RMSNorm(
            config.d_model, config.layer_norm_epsilon, param_dtype=param_dtype
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` → same."""
        return x + self.DenseReluDense(self.layer_norm(x))


class Block(nnx.Module):
    """One encoder block: ``layer = [self-attention, feed-forward]``."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        self.layer = nnx.List(
            [
                LayerSelfAttention(config, rngs=rngs, param_dtype=param_dtype),
                LayerFF(config, rngs=rngs, param_dtype=param_dtype),
            ]
        )

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` → same."""
        return self.layer[1](self.layer[0](x, mask))


class EncoderStack(nnx.Module):
    """``encoder.block.*`` and ``encoder.final_layer_norm``."""

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype):
        self.block = nnx.List(
            [Block(config, rngs=rngs, param_dtype=param_dtype) for _ in range(config.num_layers)]
        )
        self.final_layer_norm = T5RMSNorm(
            config.d_model, config.layer_norm_epsilon, param_dtype=param_dtype
        )

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` → same."""
        for block in self.block:
            x = block(x, mask)
        return self.final_layer_norm(x)


class UMT5Encoder(nnx.Module):
    """UMT5 encoder: token ids → last hidden state.

    Args:
        config: encoder config.
        rngs: random init (tiny presets; a checkpoint overwrites every parameter).
        param_dtype: parameter dtype (bfloat16 halves UMT5-XXL to ~11 GB).
    """

    def __init__(self, config: UMT5Config, *, rngs: nnx.Rngs, param_dtype=jnp.float32):
        self.config = config
        self.shared = Embedding(
            config.vocab_size, config.d_model, rngs=rngs, param_dtype=param_dtype
        )
        self.encoder = EncoderStack(config, rngs=rngs, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """Encodes a padded batch.

        Args:
            input_ids: ``[B, L]`` int token ids.
            attention_mask: ``[B, L]`` 1 for real tokens, 0 for padding.

        Returns:
            ``[B, L, d_model]`` hidden states (padding positions are *not* zeroed here).
        """
        return self.encoder(self.shared(input_ids), attention_mask)


@partial(jax.jit, static_argnums=0)
def _run_split(graphdef, state, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, state)(input_ids, attention_mask)


def run_encoder(encoder: UMT5Encoder, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Compiled :meth:`UMT5Encoder.__call__` (one compile per batch shape).

    The weights go in as a split state and only the hidden states come out: ``nnx.jit`` would also
    return (a copy of) every weight, doubling the peak for UMT5-XXL (~10.6 GiB in bfloat16).

    Args:
        encoder: the encoder.
        input_ids: ``[B, L]`` int token ids.
        attention_mask: ``[B, L]`` 1 for real tokens, 0 for padding.

    Returns:
        ``[B, L, d_model]`` hidden states in the parameter dtype.
    """
    graphdef, state = nnx.split(encoder)
    return _run_split(graphdef, state, input_ids, attention_mask)


TEXT_ENCODER_WEIGHT_STEMS = ("model",)


def load_umt5_encoder(folder: str | Path, *, param_dtype=jnp.float32) -> UMT5Encoder:
    """Loads the encoder from a transformers ``text_encoder/`` folder.

    Accepts ``model.safetensors`` or a sharded ``model.safetensors.index.json``; reads tensor by
    tensor, casting to ``param_dtype``. The embedding may be stored as ``shared.weight`` or
    ``encoder.embed_tokens.weight`` (tied). Nothing is returned unless every parameter loaded.

    Raises:
        WeightsError (a ValueError): missing folder/config/weights, corrupt file, name/shape mismatch.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise WeightsError(f"Text encoder folder {folder} does not exist")
    config = UMT5Config.from_dict(
        read_json(folder / "config.json"), source=str(folder / "config.json")
    )
    files = find_weight_files(folder, TEXT_ENCODER_WEIGHT_STEMS)
    model = nnx.eval_shape(lambda: UMT5Encoder(config, rngs=nnx.Rngs(0), param_dtype=param_dtype))
    load_torch_layout(
        model,
        files,
        dtype=param_dtype,
        aliases={"shared.weight": ("encoder.embed_tokens.weight",)},
        # A full UMT5 checkpoint also holds the decoder and LM head; the encoder never uses them.
        ignore=lambda n: (
            n.startswith(("decoder.", "lm_head.")) or n == "encoder.embed_tokens.weight"
        ),
    )
    return model


def save_umt5_encoder(encoder: UMT5Encoder, folder: str | Path) -> None:
    """Writes ``config.json`` (transformers ``UMT5Config`` keys) and ``model.safetensors``."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = dataclasses.asdict(encoder.config)
    act = "gelu" if raw["dense_act_fn"] == "gelu_new" else raw["dense_act_fn"]
    raw["feed_forward_proj"] = ("gated-" if raw["is_gated_act"] else "") + act
    raw.update(model_type="umt5", architectures=["UMT5EncoderModel"])
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    save_torch_layout(encoder, folder / "model.safetensors")
