"""Seeded random weights at a preset's real shapes, so a Wan preset runs without any download.

The transformer and the VAE are the preset's own classes at its own shapes and dtypes, their
weights drawn from the seed; a run on them costs what a run on the checkpoint costs (same
programs, same bytes), so its timings are real while its videos, and every quality figure read
from them, mean nothing.

The text encoder is not UMT5-XXL at random (5.7 B parameters, 11 GB in bfloat16, on a chip of
15.75 GiB beside the transformer) but a small seeded UMT5 (the tiny presets' one, its width the
preset's ``text_dim``) behind the byte tokenizer: its embeddings have the real shape
``[1, text_len, text_dim]`` (``[1, 512, 4096]`` for Wan), zero past each prompt's length as the
real encoder's are, so everything downstream of the encoder runs at its real shapes; the encoder
itself is not timed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from models.config import TINY_PRESETS, WanTransformerConfig
from models.prompt_encoder import PromptEncoder
from models.text_encoder import UMT5Config
from models.tiny_components import TINY_UMT5_CONFIG, TINY_VAE_CONFIG, tiny_prompt_encoder
from models.transformer import WanTransformer, abstract_transformer
from models.vae import WanVAE, WanVAEConfig

# What the weights' draw follows from besides the preset and the seed (part of the identity a
# cache key hashes): bump it when the recipe changes.
RANDOM_WEIGHTS_VERSION = 1


def preset_vae_config(name: str) -> WanVAEConfig:
    """The VAE a preset decodes with: the tiny one for the tiny presets, Wan 2.1's for Wan."""
    return TINY_VAE_CONFIG if name in TINY_PRESETS else WanVAEConfig()


def random_text_config(text_dim: int) -> UMT5Config:
    """The small seeded UMT5 of a random-weights run, ``d_model`` = the transformer's
    ``text_dim`` (the tiny presets' encoder itself at ``text_dim`` 64)."""
    return dataclasses.replace(TINY_UMT5_CONFIG, d_model=text_dim)


def random_identity(name: str, seed: int) -> str:
    """The model identity of a preset on random weights in cache keys
    (``wan2.1-t2v-1.3b|random-v1|seed=0``)."""
    return f"{name}|random-v{RANDOM_WEIGHTS_VERSION}|seed={seed}"


def random_transformer(
    config: WanTransformerConfig,
    seed: int,
    *,
    param_dtype=jnp.bfloat16,
    dtype=jnp.bfloat16,
    scan_layers: bool = False,
    shardings: Callable[[WanTransformer], nnx.State] | None = None,
) -> WanTransformer:
    """``WanTransformer`` at ``config``'s shapes with weights drawn from ``seed`` on the device.

    One compiled init program (no eager dispatch per parameter); with ``shardings`` each
    parameter is created where it belongs on the mesh, so no device ever holds the whole model.
    The unrolled and scanned forms hold the same weights.

    Args:
        config: the preset's architecture.
        seed: the weights' seed (``model.seed``).
        param_dtype: weights dtype.
        dtype: compute dtype.
        scan_layers: build the scanned form (blocks stacked along a leading layer axis).
        shardings: maps the abstract model to an ``nnx.State`` of shardings (e.g.
            ``functools.partial(models.sharding.param_shardings, mesh=mesh, rule="fsdp")``);
            None leaves every parameter on JAX's default device.

    Returns:
        The model, every parameter ``param_dtype`` at the checkpoint's shape.
    """

    def build() -> WanTransformer:
        return WanTransformer(
            config,
            rngs=nnx.Rngs(seed),
            param_dtype=param_dtype,
            dtype=dtype,
            scan_layers=scan_layers,
        )

    if shardings is None:
        return nnx.jit(build)()
    abstract = abstract_transformer(
        config, param_dtype=param_dtype, dtype=dtype, scan_layers=scan_layers
    )
    graphdef, _ = nnx.split(abstract)
    state = jax.jit(lambda: nnx.state(build()), out_shardings=shardings(abstract))()
    return nnx.merge(graphdef, state)


def random_vae(name: str, seed: int) -> WanVAE:
    """The preset's VAE decoder (float32, as a checkpoint's runs) with weights drawn from
    ``seed``."""
    return WanVAE(preset_vae_config(name), rngs=nnx.Rngs(seed), param_dtype=jnp.float32)


def random_prompt_encoder(
    text_dim: int,
    seed: int,
    *,
    max_length: int,
    cache_dir: str | Path | None = None,
    param_dtype=jnp.float32,
) -> PromptEncoder:
    """Byte tokenizer + the small seeded UMT5 of :func:`random_text_config`: prompt embeddings
    ``[B, max_length, text_dim]`` float32, zero past each prompt's length.

    Args:
        text_dim: the transformer's ``text_dim`` (4096 for Wan).
        seed: weight seed (part of the embeddings' cache identity).
        max_length: text length L (the transformer's ``text_len``: 512 for Wan).
        cache_dir: prompt-embedding cache folder, or None.
        param_dtype: the encoder's weights dtype.
    """
    return tiny_prompt_encoder(
        seed,
        max_length=max_length,
        cache_dir=cache_dir,
        param_dtype=param_dtype,
        config=random_text_config(text_dim),
    )
