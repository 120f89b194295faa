"""Memory of the transformer from the compiler, on abstract weights (nothing is allocated).

``jax.jit(...).lower(ShapeDtypeStructs).compile().memory_analysis()`` at one device's shapes, of
either two consecutive ``WanTransformerBlock`` forwards (``block_memory``) or the forward of the
same model with two layers (``forward_memory``: embeddings, blocks, head). On the target device
that is its own compiler's plan; from a CPU host it is XLA:CPU's plan, which fuses less than
XLA:TPU/GPU and runs bfloat16 dots in float32 (so it over- rather than under-counts).

Self-attention is a shape-only stand-in unless an ``attend`` is given: q, k and v pass an
``optimization_barrier`` (materialised and live together, as when handed to a real kernel) and
the output is a new q-shaped buffer. Cross-attention is the one the run's ``attend`` carries
(``cross_attend``: the Pallas kernel on ``pallas_tpu``, whose scores stay in VMEM), else the
model's own (``models.attention.cross_attention``), whose float32 scores, [B, H_group, N, L], are
then in the plan: the stand-in carries none, so a plan without the run's attend over-counts a
``pallas_tpu`` run by those scores.
14B at 720p on 8 devices (9,450 tokens per device, batch 2) compiles in about 2 s on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.estimates.tpu_compiler import compile_for
from models.config import WanTransformerConfig
from models.dtypes import dtype_of
from models.transformer import WanTransformerBlock, abstract_transformer


@dataclass(frozen=True)
class BlockMemory:
    """XLA's memory plan of one block forward on one device.

    Attributes:
        temp_bytes: temporaries XLA allocates for the block (its peak working set beyond inputs
            and output; buffer reuse already applied).
        output_bytes: the block's output [B, N_dev, dim] (the next block's input).
        activation_argument_bytes: inputs that are activations, not weights: the residual
            stream x [B, N_dev, dim], the projected text [B, L, dim], the modulation [B, 6, dim]
            and the rotary tables (cos, sin) [N_dev, head_dim / 2] float32.
        weight_argument_bytes: the block's parameters (counted by the plan's weight row instead).
    """

    temp_bytes: int
    output_bytes: int
    activation_argument_bytes: int
    weight_argument_bytes: int

    @property
    def activation_bytes(self) -> int:
        """Live activations of one block: temporaries + output + activation inputs."""
        return self.temp_bytes + self.output_bytes + self.activation_argument_bytes


def _shape_only_attend(q, k, v, *, step, layer):
    """Keeps q, k, v materialised and live together, returns a fresh q-shaped buffer."""
    del step, layer
    q, k, v = jax.lax.optimization_barrier((q, k, v))
    return q + k + v


@functools.lru_cache(maxsize=64)
def block_memory(
    tcfg: WanTransformerConfig,
    *,
    batch: int,
    tokens_per_device: int,
    dtype: str,
    param_dtype: str | None = None,
    attend: Callable[..., jax.Array] | None = None,
) -> BlockMemory:
    """Compiles two consecutive blocks on abstract weights and returns XLA's memory plan (cached).

    Two: XLA packs consecutive blocks' buffers into one arena and they interleave (XLA:CPU plans
    about 1.5x one block's temporaries for a 2-layer model, and under 3% more for each further
    layer), so the second block is what the loop's steady state looks like.

    Args:
        tcfg: transformer architecture.
        batch: samples per forward (2 with classifier-free guidance).
        tokens_per_device: video tokens one device holds (N / P under sequence parallelism).
        dtype: compute dtype name.
        param_dtype: parameter dtype name (default: ``dtype``).
        attend: self-attention compiled into the blocks (called with the last layers' indices
            and a traced step); None is the shape-only stand-in.
    """
    compute = dtype_of(dtype)
    params = dtype_of(param_dtype or dtype)
    count = max(1, min(2, tcfg.num_layers))
    make = lambda: WanTransformerBlock(tcfg, dtype=compute, param_dtype=params, rngs=nnx.Rngs(0))
    split = [nnx.split(nnx.eval_shape(make)) for _ in range(count)]
    states = [state for _, state in split]
    attend = attend or _shape_only_attend
    first = tcfg.num_layers - count  # the last layers: sparse wherever any layer is

    def forward(states, x, text, modulation, cos, sin, step):
        for i, ((graphdef, _), state) in enumerate(zip(split, states, strict=True)):
            block = nnx.merge(graphdef, state)
            x = block(x, text, modulation, (cos, sin), attend=attend, step=step, layer=first + i)
        return x

    s, tokens, half = jax.ShapeDtypeStruct, tokens_per_device, tcfg.attention_head_dim // 2
    inputs = (  # the activation inputs and the denoising step
        s((batch, tokens, tcfg.dim), compute),  # x, the residual stream
        s((batch, tcfg.text_len, tcfg.dim), compute),  # projected text
        s((batch, 6, tcfg.dim), compute),  # modulation (time_proj output, compute dtype)
        s((tokens, half), jnp.float32),  # rope cos
        s((tokens, half), jnp.float32),  # rope sin
        s((), jnp.int32),  # step: traced, so a policy's lax.cond keeps both sides
    )
    return _analyse(forward, states, *inputs)


def compiled_temp_bytes(fn: Callable[..., jax.Array], *shapes: jax.ShapeDtypeStruct) -> int:
    """Temporaries XLA plans for ``jax.jit(fn)`` at the abstract ``shapes`` (nothing runs).

    An ``ExecutorSpec``'s temporaries from the compiler, e.g.
    ``compiled_temp_bytes(lambda q, k, v: attend(q, k, v, step=0, layer=0), q, q, q)``.
    """
    return compile_for(None, fn, *shapes).temp_bytes


def device_token_grid(grid: tuple[int, int, int], devices: int) -> tuple[int, int, int] | None:
    """The (F, Hp, Wp) ``grid`` with its last axis that divides by ``devices`` divided, or None.

    One device's share of the tokens (the real split is along the frame-major flattened tokens;
    only the count matters to the compiler).
    """
    for axis in (2, 1, 0):
        if grid[axis] % devices == 0:
            return tuple(n // devices if i == axis else n for i, n in enumerate(grid))
    return None


@functools.lru_cache(maxsize=64)
def forward_memory(
    tcfg: WanTransformerConfig,
    *,
    batch: int,
    token_grid: tuple[int, int, int],
    dtype: str,
    param_dtype: str | None = None,
    attend: Callable[..., jax.Array] | None = None,
) -> BlockMemory:
    """XLA's plan of a whole transformer forward with two blocks, on abstract weights.

    Patch, text and time embeddings, rotary tables, two blocks, output head and unpatchify at one
    device's token grid: what the denoising loop's body holds (XLA:CPU plans a 2-layer Wan
    forward within 3% per further layer of a 4-layer one in float32).

    Args:
        tcfg: transformer architecture.
        batch: samples per forward.
        token_grid: (F, Hp, Wp) tokens on one device (``device_token_grid``).
        dtype: compute dtype name.
        param_dtype: parameter dtype name (default: ``dtype``).
        attend: as ``block_memory``'s.

    Returns:
        ``BlockMemory``: activation arguments are the latents, timesteps and text context.
    """
    compute, params = dtype_of(dtype), dtype_of(param_dtype or dtype)
    small = dataclasses.replace(tcfg, num_layers=max(1, min(2, tcfg.num_layers)))
    graphdef, state = nnx.split(abstract_transformer(small, param_dtype=params, dtype=compute))
    pt, ph, pw = tcfg.patch_size
    f, h, w = token_grid
    s = jax.ShapeDtypeStruct
    inputs = (
        s((batch, tcfg.in_channels, f * pt, h * ph, w * pw), compute),
        s((batch,), jnp.float32),
        s((batch, tcfg.text_len, tcfg.text_dim), compute),
        s((), jnp.int32),
    )
    attend = attend or _shape_only_attend

    def forward(state, latents, timestep, context, step):
        return nnx.merge(graphdef, state)(latents, timestep, context, attend=attend, step=step)

    return _analyse(forward, state, *inputs)


def _analyse(fn: Callable[..., Any], weights: Any, *inputs: Any) -> BlockMemory:
    """Compiles ``fn(weights, *inputs)`` on abstract arguments; its memory with the weights told
    apart from the activation arguments."""
    program = compile_for(None, fn, weights, *inputs)
    leaves = jax.tree.leaves(weights)
    weight_bytes = sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in leaves)
    activations = program.argument_bytes - weight_bytes
    return BlockMemory(program.temp_bytes, program.output_bytes, activations, weight_bytes)
