"""Memory of the transformer from the compiler, on abstract weights (nothing is allocated).

Two ways, both ``jax.jit(...).lower(ShapeDtypeStructs).compile().memory_analysis()`` on abstract
parameters (``nnx.eval_shape`` / ``abstract_transformer``) at one device's shapes:

- ``block_memory``: consecutive ``WanTransformerBlock`` forwards (two by default) on the residual
  stream [B, N / P, dim], the projected text, the modulation and the rotary tables;
- ``forward_memory``: the forward of the same model with two layers (embeddings, blocks, head),
  at one device's token grid.

The compile is for the default backend: on the target device that is its own compiler's plan;
from a CPU host it is XLA:CPU's plan for the same program, which fuses less than XLA:TPU/GPU and
runs bfloat16 dots in float32 (so it over- rather than under-counts for an accelerator). Given a
``device`` (a compile-only TPU chip, ``evalharness.estimates.tpu_compiler``) it is that chip's own
compiler's plan, Mosaic included for Pallas kernels.

Self-attention is a shape-only stand-in unless an ``attend`` is given: q, k and v pass an
``optimization_barrier`` (so all three are materialised and live together, as when handed to a
real kernel) and the output is a new q-shaped buffer. Cross-attention is the model's own
(``models.attention.cross_attention``, a group of heads at a time at large N), so its float32
scores, [B, H_group, N, L], are in the plan.

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
        compile_s: seconds the compile took (the first call's; later calls are cached).
    """

    temp_bytes: int
    output_bytes: int
    activation_argument_bytes: int
    weight_argument_bytes: int
    compile_s: float

    @property
    def activation_bytes(self) -> int:
        """Live activations of one block: temporaries + output + activation inputs."""
        return self.temp_bytes + self.output_bytes + self.activation_argument_bytes


def _shape_only_attend(q, k, v, *, step, layer):
    """Keeps q, k, v materialised and live together, returns a fresh q-shaped buffer."""
    del step, layer
    q, k, v = jax.lax.optimization_barrier((q, k, v))
    return q + k + v


def _nbytes(x: jax.ShapeDtypeStruct) -> int:
    return math.prod(x.shape) * jnp.dtype(x.dtype).itemsize


def _activations(
    tcfg: WanTransformerConfig, batch: int, tokens: int, compute: jnp.dtype
) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The block's activation inputs and the denoising step (a traced scalar, as in the loop)."""
    s, half = jax.ShapeDtypeStruct, tcfg.attention_head_dim // 2
    return (
        s((batch, tokens, tcfg.dim), compute),  # x, the residual stream
        s((batch, tcfg.text_len, tcfg.dim), compute),  # projected text
        s((batch, 6, tcfg.dim), compute),  # modulation (time_proj output, compute dtype)
        s((tokens, half), jnp.float32),  # rope cos
        s((tokens, half), jnp.float32),  # rope sin
        s((), jnp.int32),  # step: traced, so a policy's lax.cond keeps both sides
    )


@functools.lru_cache(maxsize=64)
def block_memory(
    tcfg: WanTransformerConfig,
    *,
    batch: int,
    tokens_per_device: int,
    dtype: str,
    param_dtype: str | None = None,
    attend: Callable[..., jax.Array] | None = None,
    blocks: int = 2,
    device: Any = None,
) -> BlockMemory:
    """Compiles consecutive blocks on abstract weights and returns XLA's memory plan (cached).

    Two blocks by default: XLA packs consecutive blocks' buffers into one arena and they interleave
    (XLA:CPU plans about 1.5x one block's temporaries for a 2-layer model, and under 3% more for
    each further layer), so the second block is what the loop's steady state looks like.

    Args:
        tcfg: transformer architecture.
        batch: samples per forward (2 with classifier-free guidance).
        tokens_per_device: video tokens one device holds (N / P under sequence parallelism).
        dtype: compute dtype name.
        param_dtype: parameter dtype name (default: ``dtype``).
        attend: self-attention compiled into the blocks (called with the last layers' indices
            and a traced step); None is the shape-only stand-in.
        blocks: consecutive blocks compiled (at most ``tcfg.num_layers``).
        device: the device whose compiler plans it (a compile-only TPU chip,
            ``evalharness.estimates.tpu_compiler``); None: this host's default device.

    Returns:
        The ``BlockMemory``; repeated calls with the same arguments return the cached one.
    """
    compute = dtype_of(dtype)
    params = dtype_of(param_dtype or dtype)
    count = max(1, min(blocks, tcfg.num_layers))
    split = [
        nnx.split(
            nnx.eval_shape(
                lambda: WanTransformerBlock(
                    tcfg, dtype=compute, param_dtype=params, rngs=nnx.Rngs(0)
                )
            )
        )
        for _ in range(count)
    ]
    states = [state for _, state in split]
    attend = attend or _shape_only_attend
    first = tcfg.num_layers - count  # the last layers: sparse wherever any layer is

    def forward(states, x, text, modulation, cos, sin, step):
        for i, ((graphdef, _), state) in enumerate(zip(split, states, strict=True)):
            block = nnx.merge(graphdef, state)
            x = block(x, text, modulation, (cos, sin), attend=attend, step=step, layer=first + i)
        return x

    inputs = _activations(tcfg, batch, tokens_per_device, compute)
    return _analyse(forward, states, *inputs, device=device)


def compiled_temp_bytes(fn: Callable[..., jax.Array], *shapes: jax.ShapeDtypeStruct) -> int:
    """Temporaries XLA plans for ``jax.jit(fn)`` at ``shapes`` (nothing runs or is allocated).

    A way to give ``memory_estimate.ExecutorSpec`` an executor's temporaries from the compiler, e.g.
    ``compiled_temp_bytes(lambda q, k, v: attend(q, k, v, step=0, layer=0), q, q, q)``.

    Args:
        fn: the function.
        *shapes: its abstract arguments.

    Returns:
        ``memory_analysis().temp_size_in_bytes``.
    """
    return compile_for(None, fn, *shapes).temp_bytes


def device_token_grid(grid: tuple[int, int, int], devices: int) -> tuple[int, int, int] | None:
    """A token grid with one device's share of the tokens: one axis divided by ``devices``.

    Args:
        grid: (F, Hp, Wp) of the whole video.
        devices: P.

    Returns:
        The grid with its last axis that divides by P divided (the real split is along the
        frame-major flattened tokens; only the count matters to the compiler), or None.
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
    layers: int = 2,
    device: Any = None,
) -> BlockMemory:
    """XLA's plan of a whole transformer forward with ``layers`` blocks, on abstract weights.

    The same model with fewer blocks: patch embedding, text and time embedding, rotary tables,
    ``layers`` blocks, output head and unpatchify, compiled at one device's token grid. This is
    what the denoising loop's body holds; XLA:CPU plans a 2-layer Wan forward within 3% per
    further layer of a 4-layer one in float32 (bfloat16 on a CPU adds per-layer float32 weight
    copies, an XLA:CPU artefact: its dots run in float32).

    Args:
        tcfg: transformer architecture.
        batch: samples per forward.
        token_grid: (F, Hp, Wp) tokens on one device (``device_token_grid``).
        dtype: compute dtype name.
        param_dtype: parameter dtype name (default: ``dtype``).
        attend: self-attention (None: the shape-only stand-in), called with a traced step.
        layers: blocks compiled (at most ``tcfg.num_layers``).
        device: as ``block_memory``.

    Returns:
        ``BlockMemory``: activation arguments are the latents, timesteps and text context.
    """
    compute, params = dtype_of(dtype), dtype_of(param_dtype or dtype)
    small = dataclasses.replace(tcfg, num_layers=max(1, min(layers, tcfg.num_layers)))
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

    return _analyse(forward, state, *inputs, device=device)


def _analyse(fn: Callable[..., Any], weights: Any, *inputs: Any, device: Any = None) -> BlockMemory:
    """Compiles ``fn(weights, *inputs)`` on abstract arguments (for ``device``'s compiler when
    given); its memory with the weights told apart from the activation arguments."""
    program = compile_for(device, fn, weights, *inputs)
    weight_bytes = sum(_nbytes(x) for x in jax.tree.leaves(weights))
    return BlockMemory(
        temp_bytes=program.temp_bytes,
        output_bytes=program.output_bytes,
        activation_argument_bytes=program.argument_bytes - weight_bytes,
        weight_argument_bytes=weight_bytes,
        compile_s=program.compile_s,
    )
