"""Seeded random weights at a preset's real shapes, so a Wan preset runs without any download.

The transformer and the VAE are the preset's own classes at its own shapes and dtypes, their
weights drawn from the seed; a run on them costs what a run on the checkpoint costs (same
programs, same bytes), so its timings are real while its videos, and every quality figure read
from them, mean nothing. The transformer's weights are by definition those of
``WanTransformer(config, rngs=nnx.Rngs(seed))`` (:func:`reference_random_transformer`); they are
drawn by a program that holds one block's draw, scanned over the layers
(:func:`draw_transformer`), so its trace and compile hardly grow with depth (Wan 1.3B on a CPU:
trace 14-19 s and compile 77-81 s before, about 1 s and 12-20 s now;
``evalharness/bench/weights_draw.py`` has the table and times it on any device). The VAE and
the text encoder are drawn on the host (``models.seeded_init``), as the tiny presets' are.

The text encoder is not UMT5-XXL at random (5.7 B parameters, 11 GB in bfloat16, on a chip of
15.75 GiB beside the transformer) but a small seeded UMT5 (the tiny presets' one, its width the
preset's ``text_dim``) behind the byte tokenizer: its embeddings have the real shape
``[1, text_len, text_dim]`` (``[1, 512, 4096]`` for Wan), zero past each prompt's length as the
real encoder's are, so everything downstream of the encoder runs at its real shapes; the encoder
itself is not timed.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from models.config import TINY_PRESETS, WanTransformerConfig
from models.embeddings import PatchEmbed, TimeTextEmbedding
from models.prompt_encoder import PromptEncoder
from models.text_encoder import UMT5Config
from models.tiny_components import TINY_UMT5_CONFIG, TINY_VAE_CONFIG, tiny_prompt_encoder
from models.transformer import WanTransformer, WanTransformerBlock
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


class _SeededKeys:
    """Stands in for ``nnx.Rngs(seed)`` while a transformer's weights are drawn.

    ``nnx.Rngs(seed)`` holds one stream (``default``), which ``params()`` and every other stream
    name fall back to; flax's ``RngStream`` hands out ``fold_in(key(seed), count)`` and then bumps
    ``count``, a uint32 variable. Here the counts come from an iterator, so each key is the one
    ``nnx.Rngs(seed)`` hands out on that draw, while the trace holds no counter state: flax
    inspects every new counter tracer at a cost that grows with the trace so far (quadratic over a
    model).

    Args:
        key: ``jax.random.key(seed)`` (traced inside the draw).
        counts: the count of each successive draw: Python ints, or traced uint32 scalars inside
            the layer scan.
    """

    def __init__(self, key: jax.Array, counts: Iterator[int | jax.Array]) -> None:
        self._key = key
        self._counts = counts

    def __call__(self) -> jax.Array:
        return jax.random.fold_in(self._key, next(self._counts))

    def params(self) -> jax.Array:
        return self()

    def default(self) -> jax.Array:
        return self()


class _DrawCounter:
    """Counts the keys an abstract build takes (any key serves: its values are discarded)."""

    def __init__(self) -> None:
        self.draws = 0
        self._key = jax.random.key(0)

    def params(self) -> jax.Array:
        self.draws += 1
        return self._key


def _draws(build: Callable[[nnx.Rngs], object]) -> int:
    """How many keys ``build(rngs)`` takes, counted on an abstract build."""
    counter = _DrawCounter()
    nnx.eval_shape(lambda: build(counter))  # type: ignore[arg-type]
    return counter.draws


def draw_transformer(
    config: WanTransformerConfig,
    key: jax.Array,
    *,
    param_dtype,
    dtype,
    scan_layers: bool,
    layer_shardings: nnx.State | None = None,
) -> WanTransformer:
    """``WanTransformer(config, rngs=nnx.Rngs(seed))``, its blocks drawn by one scan: the traced
    body of :func:`random_transformer` (call it under ``jit``).

    ``WanTransformer`` takes its keys in order: the embeddings' ``before``, then ``per_block``
    per block, then the output head's. Here the model is built with one block and its keys
    numbered as the full model's (that block is dropped, and XLA drops its draw), and the
    blocks are drawn by a ``lax.scan`` whose layer i numbers its keys from
    ``before + i * per_block``: every key is the one the plain build takes, so every weight is
    too, while the program holds one block's draw whatever the depth (compile time no longer
    grows with it).

    Args:
        config: the architecture.
        key: ``jax.random.key(seed)``.
        param_dtype: weights dtype.
        dtype: compute dtype.
        scan_layers: return the scanned form (the scan's stacked blocks as they are); False
            slices them into ``num_layers`` blocks.
        layer_shardings: where one block's parameters go (an ``nnx.State`` of shardings), or
            None: each layer is drawn there, sharded as the model's blocks are.

    Returns:
        The model (traced when called under ``jit``).
    """
    kw = {"param_dtype": param_dtype, "dtype": dtype}
    layers = config.num_layers
    before = _draws(
        lambda rngs: (
            PatchEmbed(config.in_channels, config.dim, config.patch_size, rngs=rngs, **kw),
            TimeTextEmbedding(config.dim, config.freq_dim, config.text_dim, rngs=rngs, **kw),
        )
    )
    per_block = _draws(lambda rngs: WanTransformerBlock(config, rngs=rngs, **kw))

    counts = itertools.chain(
        range(before + per_block), itertools.count(before + layers * per_block)
    )
    model = WanTransformer(
        dataclasses.replace(config, num_layers=1), rngs=_SeededKeys(key, counts), **kw
    )
    block_graphdef = nnx.graphdef(model.blocks[0])

    def draw_block(carry: None, first: jax.Array) -> tuple[None, nnx.State]:
        # Layer i's keys: counts first, first + 1, ... (first = before + i * per_block).
        block_counts = (first + i for i in itertools.count())
        block = WanTransformerBlock(config, rngs=_SeededKeys(key, block_counts), **kw)
        state = nnx.state(block)
        if layer_shardings is not None:
            state = jax.lax.with_sharding_constraint(state, layer_shardings)
        return carry, state

    firsts = before + per_block * jnp.arange(layers, dtype=jnp.uint32)
    _, stacked = jax.lax.scan(draw_block, None, firsts)  # every parameter [layers, ...]
    model.config = config
    model.scan_layers = scan_layers
    if scan_layers:
        model.blocks = nnx.merge(block_graphdef, stacked)
    else:
        model.blocks = nnx.List(
            [
                nnx.merge(block_graphdef, jax.tree.map(lambda x, i=i: x[i], stacked))
                for i in range(layers)
            ]
        )
    return model


def _layer_shardings(shardings: nnx.State, scan_layers: bool) -> nnx.State:
    """One block's parameter shardings out of a whole model's (layer 0's, or the stacked
    blocks' without their layer axis)."""
    if not scan_layers:
        return shardings["blocks"][0]
    return jax.tree.map(
        lambda s: NamedSharding(s.mesh, PartitionSpec(*s.spec[1:])), shardings["blocks"]
    )


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

    The weights are those of :func:`reference_random_transformer` (bit for bit), drawn by one
    compiled program whose size does not grow with depth (one block's draw, scanned over the
    layers; the seed is an argument, so every seed shares it). With ``shardings`` each parameter
    is created where it belongs on the mesh, so no device ever holds the whole model. The
    unrolled and scanned forms hold the same weights; the unrolled one is sliced out of the
    scanned one inside the program (its blocks' bytes twice at the peak).

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
    key = jax.random.key(seed)
    draw = functools.partial(
        draw_transformer, config, param_dtype=param_dtype, dtype=dtype, scan_layers=scan_layers
    )
    if shardings is None:
        return nnx.jit(draw)(key)
    abstract = nnx.eval_shape(draw, key)
    graphdef = nnx.graphdef(abstract)
    out_shardings = shardings(abstract)
    layer_shardings = _layer_shardings(out_shardings, scan_layers)
    state = jax.jit(
        lambda k: nnx.state(draw(k, layer_shardings=layer_shardings)),
        out_shardings=out_shardings,
    )(key)
    return nnx.merge(graphdef, state)


def reference_random_transformer(
    config: WanTransformerConfig,
    seed: int,
    *,
    param_dtype=jnp.bfloat16,
    dtype=jnp.bfloat16,
    scan_layers: bool = False,
) -> WanTransformer:
    """The definition of :func:`random_transformer`'s weights: the model built under ``jit``
    with ``nnx.Rngs(seed)``, its blocks drawn one by one (stacked after for the scanned form).

    Slow at Wan's depth (its trace grows quadratically with the draws, its program with the
    blocks): the test oracle and the benchmark's baseline, not for runs.

    Args:
        config: the architecture.
        seed: the weights' seed.
        param_dtype: weights dtype.
        dtype: compute dtype.
        scan_layers: build the scanned form.
    """
    return nnx.jit(
        lambda: WanTransformer(
            config,
            rngs=nnx.Rngs(seed),
            param_dtype=param_dtype,
            dtype=dtype,
            scan_layers=scan_layers,
        )
    )()


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
