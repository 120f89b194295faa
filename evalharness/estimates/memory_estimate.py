"""Per-device memory of a comparison, component by component and arm by arm, before anything runs.

Phases, in the order ``evalharness.run`` goes through them:

- resident: the transformer's weights (sharded by ``models.sharding`` under "fsdp") and whatever
  text-encoder weights the caller says stay on the device;
- encode: the text encoder's peak (released before the loop);
- denoise: one arm's loop: its state, the transformer's live activations from the compiler
  (``evalharness.estimates.block_memory``), under "fsdp" the gathered weights of the computing
  and the prefetched block, then the attention call: routing (sparse arm), freed before the
  executor runs, or the head exchange + layout copies + the executor's temporaries;
- decode: the VAE's tile peak, after the loop.

``evalharness.estimates.memory_table`` combines them. Only ``jax.ShapeDtypeStruct`` are compiled
and abstract models built: planning 14B at 1440p allocates no weights and no N x N array.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import AbstractMesh

from evalharness.estimates.attention_memory import (
    F32,
    AttentionShape,
    ExecutorSpec,
    attention_shape,
    exchange_buffer_bytes,
    layout_copy_bytes,
    routing_buffer_bytes,
)
from evalharness.estimates.block_memory import (
    BlockMemory,
    block_memory,
    device_token_grid,
    forward_memory,
)
from evalharness.estimates.memory_table import MemoryTable, add_runtime_overhead
from evalharness.estimates.tpu_compiler import compiler_reason
from models.accelerator_env import platform_family
from models.config import WanTransformerConfig
from models.dtypes import dtype_of
from models.sharding import param_bytes_per_device
from models.transformer import abstract_transformer
from models.video_geometry import VideoGeometry

# Blocks whose gathered ("fsdp") weights are live at once: the one computing and the one XLA's
# scheduler prefetches to hide the all-gather.
GATHERED_BLOCKS = 2


def loop_state_bytes(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    *,
    batch: int,
    dtype_bytes: int,
    forward_compiled: bool,
) -> int:
    """The denoising loop's state beside the transformer (``models.pipeline.DenoiseLoop``).

    Latents [1, 16, F, H, W] float32: the four UniPC fields, the initial noise, the result and the
    guided combination (7); prompt and negative-prompt embeddings [1, L, text_dim] float32.
    Unless the compiled forward already holds them (``forward_compiled``): the model's
    input and velocity [B, 16, F, H, W], the [B, L, text_dim] concatenated context, the projected
    text [B, L, dim], temb and modulation [B, 7 dim] float32 and the rotary tables (cos, sin)
    [N, D / 2] float32.
    """
    latent = math.prod(geometry.latent_shape(tcfg.in_channels))
    state = 7 * latent * F32 + 2 * tcfg.text_len * tcfg.text_dim * F32
    if forward_compiled:
        return state
    io = 2 * batch * latent * dtype_bytes + batch * tcfg.text_len * tcfg.text_dim * F32
    text = batch * tcfg.text_len * tcfg.dim * dtype_bytes + batch * 7 * tcfg.dim * F32
    rope = 2 * geometry.tokens * (tcfg.attention_head_dim // 2) * F32
    return state + io + text + rope


def _compiler(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    batch: int,
    devices: int,
    dtype: str,
    param_dtype: str,
    target_platform: str | None,
) -> Callable[..., BlockMemory]:
    """How the transformer is compiled: ``compile(attend=None) -> BlockMemory``.

    The forward of a 2-layer model (``forward_memory``: embeddings, head and the interplay of
    consecutive blocks included) when a device's token grid exists and the plan is for this
    host's platform or in float32; otherwise two consecutive blocks (``block_memory``), because
    XLA:CPU runs bfloat16 dots in float32 and its plan for a whole bf16 forward holds float32
    copies of the embeddings' weights that a TPU or GPU never makes.
    """
    grid = device_token_grid(geometry.token_grid, devices)
    native = target_platform in (None, platform_family(jax.devices()[0].platform))
    common = dict(dtype=str(dtype), param_dtype=str(param_dtype))
    if grid is not None and (str(dtype) == "float32" or native):
        return functools.partial(forward_memory, tcfg, batch=batch, token_grid=grid, **common)
    local = -(-geometry.tokens // devices)
    return functools.partial(block_memory, tcfg, batch=batch, tokens_per_device=local, **common)


@functools.lru_cache(maxsize=16)
def weight_bytes_per_device(
    tcfg: WanTransformerConfig, *, param_dtype: str, devices: int
) -> tuple[int, int]:
    """(resident weight bytes, gathered-weight bytes) per device, on abstract weights.

    Returns:
        ``param_bytes_per_device`` of the whole model ("fsdp" on several devices, else
        "replicated"), and under "fsdp" the full weights of ``GATHERED_BLOCKS`` blocks minus their
        shards (0 when replicated).
    """
    rule = "fsdp" if devices > 1 else "replicated"
    model = abstract_transformer(tcfg, param_dtype=dtype_of(param_dtype))
    mesh = AbstractMesh((devices,), ("seq",))
    resident = param_bytes_per_device(model, mesh, rule)
    if devices == 1:
        return resident, 0
    block = model.blocks[0]
    full = param_bytes_per_device(block, AbstractMesh((1,), ("seq",)), "replicated")
    shard = param_bytes_per_device(block, mesh, rule)
    return resident, GATHERED_BLOCKS * (full - shard)


# The attention call's rows and their phases (routing is not live with the others).
_ATTENTION_PHASES = {
    "routing": "routing",
    "head exchange": "attention",
    "layout copies": "attention",
    "attention executor": "attention",
}
_NOTES = {
    "transformer weights": "parameters per device (models.sharding rule)",
    "text encoder (resident)": "text-encoder weights the caller keeps on the device",
    "gathered block weights": "fsdp: full weights of the computing and the prefetched block",
    "text encoder": "peak while encoding the prompts (released before the loop)",
    "loop state": "latents, sampler history, prompt embeddings, rotary tables",
    "transformer": {
        False: "XLA memory_analysis of two consecutive blocks (temporaries, output, inputs)",
        True: "XLA memory_analysis of a 2-layer model's forward (temporaries, output, inputs)",
    },
    "runtime overhead": (
        "what the runtime allocates beyond XLA's plan, a fraction of the loop's planned bytes: "
        "measured on a CPU (evalharness.bench.memory), stated for a GPU (5%), 0 on a TPU"
    ),
    "routing": "float32 K/V copies, [B, H, R, N/P] scores and softmaxes (sparse arm)",
    "head exchange": "q, k, v, out head-sharded after the all-to-all (several devices)",
    "layout copies": "q, k, v, out in each head's layout (sparse arm)",
    "attention executor": (
        "the executor's temporaries (ExecutorSpec); for arms marked compiled, XLA's extra bytes "
        "for the arm's whole attention compiled into the blocks (routing, layouts included)"
    ),
    "VAE decode": "peak of decoding one tile (after the loop)",
}


@functools.lru_cache(maxsize=32)
def _on_head_share(attend: Callable[..., Any], devices: int) -> Callable[..., Any]:
    """``attend`` called on a device's [B, N, H / P, D] share, from the block's [B, N / P, H, D].

    The reshape stands in for the all-to-all (same bytes; the exchange's own buffers are the
    "head exchange" row). Cached so the compiled blocks' cache sees one function per arm.
    """
    if devices == 1:
        return attend

    def shared(q, k, v, *, step, layer):
        b, n, h, d = q.shape
        to_heads = lambda x: x.reshape(b, n * devices, h // devices, d)  # noqa: E731
        out = attend(to_heads(q), to_heads(k), to_heads(v), step=step, layer=layer)
        return out.reshape(b, n, h, d)

    return shared


def _compiled_attention(
    compile_: Callable[..., BlockMemory],
    spec: ExecutorSpec,
    stand_in: int,
    devices: int,
    shape: AttentionShape,
    tcfg: WanTransformerConfig,
) -> int | None:
    """The arm's attention bytes as XLA plans them in the transformer, or None if not compiled
    (no ``attend``, or heads that need padding to split over the devices)."""
    if spec.attend is None or shape.heads * devices != tcfg.num_attention_heads:
        return None
    try:
        compiled = compile_(attend=_on_head_share(spec.attend, devices))
    except Exception as error:  # noqa: BLE001 - any compiler's refusal, named with its arm
        raise ArmCompileError(f"{spec.name}: {compiler_reason(error)}") from error
    return max(0, compiled.activation_bytes - stand_in)


class ArmCompileError(RuntimeError):
    """An arm's attention did not compile into the transformer (e.g. Mosaic refused its tiles)."""


def _attention_rows(
    tcfg: WanTransformerConfig,
    spec: ExecutorSpec,
    shape: AttentionShape,
    *,
    devices: int,
    placement: str,
    compiled: int | None,
) -> dict[str, int]:
    """Routing, exchange, layout and executor bytes of one arm's attention call."""
    exchange = exchange_buffer_bytes(shape, devices=devices, heads=tcfg.num_attention_heads)
    if compiled is not None:
        attention = {"routing": 0, "head exchange": exchange, "layout copies": 0}
        return attention | {"attention executor": compiled}
    routing = layout = 0
    if spec.routed and spec.routing_samples:
        routing = routing_buffer_bytes(
            batch=shape.batch,
            tokens=shape.tokens,
            heads=tcfg.num_attention_heads,
            head_dim=shape.head_dim,
            samples=spec.routing_samples,
            devices=devices,
        )
    if spec.routed and spec.layout_change:
        layout = (
            shape.tensor_bytes
            if spec.fuses_layout
            else layout_copy_bytes(shape, devices=devices, placement=placement)
        )
    return {
        "routing": routing,
        "head exchange": exchange,
        "layout copies": layout,
        "attention executor": spec.executor_bytes(shape),
    }


def estimate_memory(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    *,
    batch: int,
    devices: int,
    param_dtype: str,
    dtype: str,
    executors: Mapping[str, ExecutorSpec],
    text_encoder_bytes: int,
    vae_bytes: int,
    device_bytes: int,
    placement: str = "head_local",
    text_encoder_resident_bytes: int = 0,
    device: str = "device",
    target_platform: str | None = None,
    runtime_overhead: float = 0.0,
) -> MemoryTable:
    """Plans the per-device memory of every arm (abstract weights, compiled block; nothing runs).

    Args:
        tcfg: transformer architecture.
        geometry: the video (its tokens N and latent shape).
        batch: samples per transformer call (2 with joint classifier-free guidance, 1 with
            separate guidance passes or none).
        devices: P, devices the sequence is split over.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        executors: arm ("dense", "noise_floor", "sparse") -> its ``ExecutorSpec``.
        text_encoder_bytes: the text encoder's device peak while encoding (0 when on the host).
        vae_bytes: the VAE's device peak while decoding (weights + one tile).
        device_bytes: memory of one device.
        placement: sequence-parallel layout placement ("head_local" or "before_exchange").
        text_encoder_resident_bytes: text-encoder weights that stay on the device all run.
        device: the device's name, for the table.
        target_platform: "tpu", "gpu" or "cpu" when planning for another platform than this
            host's (a dry run); None: this host's. Decides what is compiled (``_compiler``).
        runtime_overhead: ``DeviceTarget.runtime_overhead``.
    """
    if not executors:
        raise ValueError("executors is empty; give at least one arm's ExecutorSpec")
    act = dtype_of(dtype).itemsize
    resident, gathered = weight_bytes_per_device(
        tcfg, param_dtype=str(param_dtype), devices=devices
    )
    compile_ = _compiler(tcfg, geometry, batch, devices, dtype, param_dtype, target_platform)
    model = compile_()
    forward = compile_.func is forward_memory
    shape = attention_shape(
        tcfg, batch=batch, tokens=geometry.tokens, devices=devices, dtype_bytes=act
    )
    state = loop_state_bytes(tcfg, geometry, batch=batch, dtype_bytes=act, forward_compiled=forward)
    common = {  # every arm's, in the order the run meets them; the attention rows come next
        "transformer weights": ("resident", resident),
        "text encoder (resident)": ("resident", text_encoder_resident_bytes),
        "gathered block weights": ("denoise", gathered),
        "text encoder": ("encode", text_encoder_bytes),
        "loop state": ("denoise", state),
        "transformer": ("denoise", model.activation_bytes),
    }
    rows = {component: dict.fromkeys(executors, size) for component, (_, size) in common.items()}
    phases = {component: phase for component, (phase, _) in common.items()}
    attention, names = _arms(compile_, executors, model, devices, shape, tcfg, placement)
    for component, phase in _ATTENTION_PHASES.items():
        rows[component] = {arm: attention[arm][component] for arm in executors}
        phases[component] = phase
    rows["VAE decode"], phases["VAE decode"] = dict.fromkeys(executors, vae_bytes), "decode"
    add_runtime_overhead(rows, phases, runtime_overhead, sorted(executors))
    notes = dict(_NOTES, transformer=_NOTES["transformer"][forward])
    return MemoryTable(rows, phases, notes, device_bytes, device, names)


def _arms(
    compile_: Callable[..., BlockMemory],
    executors: Mapping[str, ExecutorSpec],
    model: BlockMemory,
    devices: int,
    shape: AttentionShape,
    tcfg: WanTransformerConfig,
    placement: str,
) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Each arm's attention rows and column title (executor, a routed arm's dense-step executor,
    and how counted); an arm with an ``attend`` is compiled into the transformer where its heads
    split evenly (``_compiled_attention``)."""
    attention, names = {}, {}
    for arm, spec in executors.items():
        compiled = _compiled_attention(compile_, spec, model.activation_bytes, devices, shape, tcfg)
        attention[arm] = _attention_rows(
            tcfg, spec, shape, devices=devices, placement=placement, compiled=compiled
        )
        dense = f" / {spec.dense_name}" if spec.routed and spec.dense_name else ""
        names[arm] = spec.name + dense + (", compiled" if compiled is not None else "")
    return attention, names
