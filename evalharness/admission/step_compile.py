"""The run's whole denoising loop compiled for a TPU or GPU topology that is not attached.

The run's own program on abstract weights: ``models.pipeline.DenoiseLoop`` (its ``fori_loop`` body
is one denoising step, so the program's memory is the step's, whatever the step count), every
layer, the weights placed as the run places them (``fsdp`` over the sequence mesh for checkpoint
models, replicated for the seeded presets), latents and prompt embeddings replicated, and each
arm's attention wrapped as the run wraps it (``kernels.parallel.attend.parallelize``: routing, the
all-to-all head exchange, the head-local permutation, the executor, the exchange back). The sparse
arm's program holds both branches of its schedule; ``guidance_passes`` is the run's.

``memory_analysis()`` is one chip's: arguments (its weight shard, the inputs), outputs,
temporaries (activations, gathered weights, exchange buffers, the kernels' HBM scratch, the
sampler's state) and code. It replaces our model's denoising rows; the text encoder's and VAE's
rows stay ours (``phase_compile`` may replace them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from evalharness.assembly import run_sampler
from evalharness.config import EvalConfig
from evalharness.estimates import (
    CompiledProgram,
    MemoryTable,
    TpuCompiler,
    add_runtime_overhead,
    compile_program,
)
from kernels.parallel.attend import parallelize
from kernels.parallel.mesh import SEQ_AXIS
from models.config import TINY_PRESETS, WanTransformerConfig
from models.dtypes import dtype_of
from models.pipeline import DenoiseLoop, uses_guidance
from models.sharding import param_shardings
from models.transformer import abstract_transformer

# Collectives in the compiled HLO (an async pair counts once, by its start).
_COLLECTIVES = {
    "all-to-all": re.compile(r" all-to-all(?:-start)?\("),
    "all-gather": re.compile(r" all-gather(?:-start)?\("),
    "all-reduce": re.compile(r" all-reduce(?:-start)?\("),
}


@dataclass(frozen=True)
class StepProgram:
    """One arm's denoising loop as the TPU compiler planned it, per chip.

    Attributes:
        program: the compiler's figures (arguments, outputs, temporaries, code, compile seconds).
        weight_bytes: the arguments that are this chip's share of the weights.
        collectives: collective name -> how many the compiled program holds.
    """

    program: CompiledProgram
    weight_bytes: int
    collectives: Mapping[str, int]

    @property
    def input_bytes(self) -> int:
        """Arguments that are not weights: the noise and prompt embeddings."""
        return self.program.argument_bytes - self.weight_bytes


def compile_run_step(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    compiler: TpuCompiler,
    devices: int,
    attend: Callable[..., jax.Array],
) -> StepProgram:
    """Compiles one arm's denoising loop for ``devices`` chips of ``compiler``'s topology.

    Args:
        cfg: the run's config, resolved for TPU.
        tcfg: the transformer architecture (every layer is compiled).
        compiler: the compile-only topology (``evalharness.estimates.topology_compiler``).
        devices: P, chips the sequence is split over (at most the topology's).
        attend: the arm's single-device attention (the executor after the head exchange, or an
            ``AttentionPolicy``); wrapped for the mesh when ``devices`` > 1.

    Returns:
        The ``StepProgram``.

    Raises:
        Exception: whatever the chip's compiler or Mosaic raises (a refused kernel, HBM).
    """
    video = cfg.resolution.video
    chips = compiler.devices or (compiler.device,)
    if devices > len(chips):
        raise ValueError(f"{devices} chips asked of a topology of {len(chips)}")
    compute = dtype_of(cfg.dtype)
    params = dtype_of(cfg.model.param_dtype)
    model = abstract_transformer(
        tcfg, param_dtype=params, dtype=compute, scan_layers=cfg.model.scan_layers
    )
    if devices > 1:
        mesh = Mesh(np.asarray(chips[:devices]), (SEQ_AXIS,))
        rule = "replicated" if cfg.model.name in TINY_PRESETS else "fsdp"
        weights = param_shardings(model, mesh, rule)
        inputs = NamedSharding(mesh, P())
        attend = parallelize(
            attend, mesh, placement=cfg.parallel.permute_placement.value, tokens=video.tokens
        )
    else:
        inputs = SingleDeviceSharding(chips[0])
        weights = jax.tree.map(lambda _: inputs, nnx.state(model))
    graphdef, state = nnx.split(model)
    state = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, weights
    )
    loop = DenoiseLoop(
        nnx.merge(graphdef, state),
        run_sampler(cfg),
        guidance_scale=cfg.guidance_scale,
        attend=attend,
        guidance_passes=cfg.guidance_passes.value,
    )
    noise = jax.ShapeDtypeStruct((1, *video.latent_shape(tcfg.in_channels)), jnp.float32)
    context = jax.ShapeDtypeStruct((1, tcfg.text_len, tcfg.text_dim), jnp.float32)
    negative = context if uses_guidance(cfg.guidance_scale, cfg.negative_prompt) else None
    placed = [
        None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=inputs)
        for x in (noise, context, negative)
    ]
    compiled, program = compile_program(lambda: loop.lower(*placed).compile())
    return StepProgram(program, _shard_bytes(state), _count_collectives(compiled.as_text()))


def step_memory_table(
    steps: Mapping[str, StepProgram],
    *,
    executors: Mapping[str, str],
    model: MemoryTable,
    runtime_overhead: float,
    described: str,
) -> MemoryTable:
    """The memory table with the compiled loops in place of our model's denoising rows.

    Args:
        steps: arm -> its compiled loop.
        executors: arm -> the executor's name (the column titles).
        model: our model's table (its text-encoder and VAE rows are kept, and its device).
        runtime_overhead: the target's runtime overhead, a fraction of the loop's bytes.
        described: the compiler, e.g. ``TPU v6 lite 2x4 by libtpu 0.0.42.1``.

    Returns:
        A ``MemoryTable`` whose denoise phase is the TPU compiler's.
    """
    arms = list(steps)

    def each(value: Callable[[StepProgram], int]) -> dict[str, int]:
        return {arm: value(step) for arm, step in steps.items()}

    def kept(component: str) -> dict[str, int]:
        return dict.fromkeys(arms, max(model.rows.get(component, {}).values(), default=0))

    compiled = {  # component -> (phase, bytes per arm)
        "transformer weights": ("resident", each(lambda s: s.weight_bytes)),
        "text encoder": ("encode", kept("text encoder")),
        "loop inputs and output": (
            "denoise",
            each(lambda s: s.input_bytes + s.program.output_bytes),
        ),
        "denoising step (compiled)": ("denoise", each(lambda s: s.program.temp_bytes)),
        "generated code": ("denoise", each(lambda s: s.program.code_bytes)),
    }
    rows = {component: row for component, (_, row) in compiled.items()}
    phases = {component: phase for component, (phase, _) in compiled.items()}
    add_runtime_overhead(rows, phases, runtime_overhead, arms)
    rows["VAE decode"] = kept("VAE decode")
    phases["VAE decode"] = "decode"
    return replace(
        model, rows=rows, phases=phases, notes=_notes(model, described), executors=dict(executors)
    )


def _notes(model: MemoryTable, described: str) -> dict[str, str]:
    """What each row of the compiled table counts, and whose figure it is."""
    return {
        "transformer weights": f"this chip's share of the weights as placed for the run ({described})",
        "text encoder": model.notes.get("text encoder", "") + " (our model)",
        "loop inputs and output": "noise and prompt embeddings in, latents out (compiled)",
        "denoising step (compiled)": (
            f"temporaries of the whole denoising loop, every layer, compiled by {described}: "
            "activations, gathered weights, all-to-all buffers, the kernels' HBM scratch, the "
            "sampler's state"
        ),
        "generated code": f"the compiled loop's code ({described})",
        "runtime overhead": model.notes.get("runtime overhead", ""),
        "VAE decode": model.notes.get("VAE decode", "") + " (our model)",
    }


def describe_collectives(steps: Mapping[str, StepProgram]) -> str:
    """E.g. ``dense: 80 all-to-all, 6 all-gather; sparse: 160 all-to-all, ...``."""
    parts = []
    for arm, step in steps.items():
        counts = ", ".join(f"{n} {name}" for name, n in step.collectives.items() if n)
        parts.append(f"{arm}: {counts or 'no collectives'}")
    return "; ".join(parts)


def _shard_bytes(state: Any) -> int:
    """Bytes of one device's shard of every abstract array in ``state``."""
    total = 0
    for leaf in jax.tree.leaves(state):
        shape = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shape) * jnp.dtype(leaf.dtype).itemsize
    return total


def _count_collectives(hlo: str) -> dict[str, int]:
    return {name: len(pattern.findall(hlo)) for name, pattern in _COLLECTIVES.items()}
