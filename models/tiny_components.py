"""Tiny transformer, VAE, UMT5 encoder and tokenizer with seeded weights (the seeded presets).

Same classes and functions as a real checkpoint (``WanTransformer``, ``WanVAE`` +
``decode_to_frames``, ``UMT5Encoder`` inside a ``PromptEncoder``); only the sizes and the weights'
origin differ. The transformer of preset ``tiny-planted`` has planted spatial and temporal
attention heads (``models.planted_heads``); ``tiny-random`` keeps the plain random draw. The tiny
UMT5's ``d_model`` (64) is the tiny transformer's ``text_dim``; the VAE keeps 16 latent channels
(the trained ``tiny`` has the same encoder and VAE sizes).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.config import SEEDED_PRESETS, get_transformer_config
from models.planted_heads import PLANTED_VERSION, plant_heads
from models.prompt_encoder import PromptEncoder
from models.text_encoder import UMT5Config, UMT5Encoder
from models.tokenizer import ByteTokenizer
from models.transformer import WanTransformer, to_scanned
from models.vae import WanVAE, WanVAEConfig

# Distinct per-channel latent statistics (not the real Wan ones) keep the un-normalisation
# visible in tests.
_TINY_Z = 16

TINY_VAE_CONFIG = WanVAEConfig(
    base_dim=8,
    z_dim=_TINY_Z,
    dim_mult=(1, 2, 4, 4),
    num_res_blocks=1,
    temperal_downsample=(False, True, True),
    latents_mean=tuple(float(x) for x in np.linspace(-0.5, 0.5, _TINY_Z)),
    latents_std=tuple(float(x) for x in np.linspace(0.8, 1.6, _TINY_Z)),
)

TINY_UMT5_CONFIG = UMT5Config(
    vocab_size=ByteTokenizer.VOCAB_SIZE,
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
)


def tiny_transformer(
    name: str = "tiny-planted",
    seed: int = 0,
    *,
    param_dtype=jnp.float32,
    dtype=jnp.float32,
    scan_layers: bool = False,
) -> WanTransformer:
    """The tiny Wan transformer (2 blocks, 4 heads x 64) with seeded weights.

    Args:
        name: "tiny-planted" (planted spatial / temporal heads, ``models.planted_heads``) or
            "tiny-random" (the plain random draw).
        seed: weight seed.
        param_dtype: weights dtype.
        dtype: compute dtype.
        scan_layers: the scanned form (the same weights, heads planted first).
    """
    if name not in SEEDED_PRESETS:
        raise ValueError(f"name={name!r}; the seeded presets are {SEEDED_PRESETS}")
    config = get_transformer_config(name)
    # One compiled init program instead of an eager dispatch per parameter.
    model = nnx.jit(
        lambda: WanTransformer(config, rngs=nnx.Rngs(seed), param_dtype=param_dtype, dtype=dtype)
    )()
    if name == "tiny-planted":
        plant_heads(model)
    return to_scanned(model) if scan_layers else model


def tiny_identity(name: str, seed: int) -> str:
    """The model identity of a seeded preset in cache keys: its name, its weights' recipe and
    seed (``tiny|planted-v1|seed=0``, ``tiny-random|seed=0``)."""
    if name not in SEEDED_PRESETS:
        raise ValueError(f"name={name!r}; the seeded presets are {SEEDED_PRESETS}")
    recipe = f"|planted-v{PLANTED_VERSION}" if name == "tiny-planted" else ""
    return f"{name}{recipe}|seed={seed}"


def tiny_vae(seed: int = 0, *, param_dtype=jnp.float32) -> WanVAE:
    """The tiny Wan VAE decoder (base_dim 8, z_dim 16) with seeded random weights."""
    return WanVAE(TINY_VAE_CONFIG, rngs=nnx.Rngs(seed), param_dtype=param_dtype)


def tiny_umt5_encoder(
    seed: int = 0, *, param_dtype=jnp.float32, config: UMT5Config = TINY_UMT5_CONFIG
) -> UMT5Encoder:
    """The tiny UMT5 (d_model 64, 2 layers, 4 heads; or ``config``) with seeded random weights."""
    return UMT5Encoder(config, rngs=nnx.Rngs(seed), param_dtype=param_dtype)


def tiny_prompt_encoder(
    seed: int = 0,
    *,
    max_length: int = 32,
    cache_dir: str | Path | None = None,
    param_dtype=jnp.float32,
    device: jax.Device | None = None,
    config: UMT5Config = TINY_UMT5_CONFIG,
) -> PromptEncoder:
    """Byte tokenizer + tiny UMT5, built (from the seed) only when a prompt misses the cache.

    Args:
        seed: weight seed (part of the cache identity).
        max_length: text length L (the tiny transformer's ``text_len``).
        cache_dir: prompt-embedding cache folder, or None.
        param_dtype: weights dtype.
        device: where the encoder is built and run; None for JAX's default device.
        config: the encoder's architecture (a random-weights run widens ``d_model`` to its
            transformer's ``text_dim``, ``models.random_weights``); part of the cache identity.
    """
    tokenizer = ByteTokenizer()
    config_tag = ",".join(f"{k}={v}" for k, v in dataclasses.asdict(config).items())
    identity = (
        f"tiny-umt5[{config_tag}]|seed={seed}|{jnp.dtype(param_dtype).name}|{tokenizer.identity}"
    )
    return PromptEncoder(
        tokenizer=tokenizer,
        # Seeded, so every (re)build after a release gives the same weights.
        loader=functools.partial(tiny_umt5_encoder, seed, param_dtype=param_dtype, config=config),
        config=config,
        max_length=max_length,
        identity=identity,
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
        device=device,
    )
