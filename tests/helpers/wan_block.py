"""Wan 2.1 1.3B's transformer block at 480p, abstract, for compiles that need no weights."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from models.config import WanTransformerConfig, get_transformer_config
from models.rope import rope_tables
from models.transformer import WanTransformerBlock

GRID_480P = (21, 30, 52)  # latent frames x patch rows x patch columns: 32,760 tokens
TEXT_TOKENS = 512


class AbstractBlock(NamedTuple):
    """One bf16 block as shapes: ``graph`` and ``state`` (nnx.split), ``rope`` tables, and the
    block's inputs after ``state``: activations [2, N, dim], text [2, 512, dim], modulation
    [2, 6, dim] (``ShapeDtypeStruct``)."""

    config: WanTransformerConfig
    graph: Any
    state: Any
    rope: tuple[jax.Array, jax.Array]
    tokens: int
    inputs: tuple[jax.ShapeDtypeStruct, ...]


def wan13b_block_480p() -> AbstractBlock:
    """Wan 1.3B's block at 480p, CFG batch 2, bfloat16, with abstract weights."""
    config = get_transformer_config("wan2.1-t2v-1.3b")
    block = nnx.eval_shape(
        lambda: WanTransformerBlock(
            config, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0)
        )
    )
    graph, state = nnx.split(block)
    rope = rope_tables(GRID_480P, config.attention_head_dim, max_seq_len=config.rope_max_seq_len)
    tokens, shape = math.prod(GRID_480P), jax.ShapeDtypeStruct
    inputs = (
        shape((2, tokens, config.dim), jnp.bfloat16),
        shape((2, TEXT_TOKENS, config.dim), jnp.bfloat16),
        shape((2, 6, config.dim), jnp.float32),
    )
    return AbstractBlock(config, graph, state, rope, tokens, inputs)


def compiled_for_v5e(block: AbstractBlock, attend) -> tuple[str, float]:
    """The block with self-attention ``attend`` (step 3, layer 1) compiled for one TPU v5e from
    this machine (libtpu, compile-only): its optimized HLO and XLA's count of the bytes it moves.
    """
    from evalharness.estimates import topology_compiler
    from evalharness.estimates.tpu_compiler import on_device

    def run(state, x, text, modulation):
        module = nnx.merge(block.graph, state)
        return module(x, text, modulation, block.rope, attend=attend, step=3, layer=1)

    args = on_device((block.state, *block.inputs), topology_compiler("v5e:1x1").device)
    program = jax.jit(run).lower(*args).compile()
    analysis = program.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return program.as_text(), analysis["bytes accessed"]
