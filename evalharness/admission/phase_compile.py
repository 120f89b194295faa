"""The text encoder and the VAE decode compiled for the chip, as the run calls them.

The run encodes each prompt alone (``models.prompt_encoder.PromptEncoder``: one prompt of
``text_len`` tokens, UMT5 in the model's parameter dtype on the mesh's first chip) and decodes each
arm's latents with the float32 VAE, tile by tile for checkpoint models (``TilingConfig``'s 256 x
256-pixel tiles: one program, edge tiles smaller calls of it) and whole for the seeded presets.
``models.text_encoder``'s and ``models.vae``'s own jitted functions are compiled here on abstract
weights for the target's chip: ``memory_analysis()`` gives each phase's peak and
``cost_analysis()`` its FLOPs, in place of our model's rows (``models.peak_memory``) and counts.

They take minutes for a TPU on a small machine (the VAE's tile most) and depend only on the model,
dtype, tile and compiler: their figures are kept under ``<cache_dir>/chip_programs/``, one JSON
file per program (keyed by the SHA-256 of its StableHLO text and the compiler's description), and
read back by a later dry run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.admission.chip_compile import ChipCompile
from evalharness.admission.heartbeat import heartbeat
from evalharness.admission.run_timing import (
    CompiledWork,
    decode_tiles,
    text_encoder_config,
    vae_config,
)
from evalharness.config import EvalConfig
from evalharness.estimates import (
    GIB,
    CompiledProgram,
    MemoryTable,
    TpuCompiler,
    compile_program,
    compiler_reason,
    on_device,
)
from models.config import TINY_PRESETS, WanTransformerConfig
from models.dtypes import dtype_of
from models.text_encoder import UMT5Encoder, _run_split
from models.vae import WanVAE, _decode_split

# The memory table's rows of the two phases, by phase.
PHASE_ROWS = {"encode": "text encoder", "decode": "VAE decode"}


@dataclass(frozen=True)
class PhaseProgram:
    """One phase's program as the chip's compiler planned it.

    Attributes:
        program: the compiler's figures (arguments, outputs, temporaries, code, compile seconds).
        flops: XLA's cost analysis of one call.
        calls: how many calls of it one use makes (the VAE's tiles, counted by area: edge tiles
            are smaller calls of the same program), 1 for the text encoder.
        what: what was compiled, e.g. ``UMT5 on 1 x 512 tokens, bfloat16 weights``.
    """

    program: CompiledProgram
    flops: float
    calls: float
    what: str

    @property
    def total_flops(self) -> float:
        """FLOPs of one use: one prompt's encoding, or one arm's whole decode."""
        return self.flops * self.calls


def compile_phases(
    cfg: EvalConfig, tcfg: WanTransformerConfig, compiler: TpuCompiler
) -> dict[str, PhaseProgram]:
    """The programs ``cfg.chip_compile_phases`` names (the text encoder's, the VAE decode's)
    compiled for ``compiler``'s chip.

    Args:
        cfg: the run's config.
        tcfg: the transformer (its ``text_len`` is the prompt's token count).
        compiler: the compile-only topology (its first chip is where the run puts them).

    Returns:
        ``{"encode": ..., "decode": ...}``, the phases compiled only.

    Raises:
        Exception: whatever the compiler raises (HBM).
    """
    described = compiler.describe()
    programs = {}
    for phase in cfg.chip_compile_phases.phases:
        with heartbeat(f"the {PHASE_ROWS[phase]} for {described}"):
            if phase == "encode":
                programs[phase] = _compile_encoder(cfg, tcfg, compiler)
            else:
                programs[phase] = _compile_decoder(cfg, compiler)
    return programs


def _compile_encoder(
    cfg: EvalConfig, tcfg: WanTransformerConfig, compiler: TpuCompiler
) -> PhaseProgram:
    """``run_encoder``'s program on one prompt of ``text_len`` tokens."""
    config = text_encoder_config(cfg)
    param_dtype = dtype_of(cfg.model.param_dtype)
    encoder = nnx.eval_shape(lambda: UMT5Encoder(config, rngs=nnx.Rngs(0), param_dtype=param_dtype))
    graphdef, state = nnx.split(encoder)
    ids = jax.ShapeDtypeStruct((1, tcfg.text_len), jnp.int32)
    lowered = _run_split.lower(graphdef, *on_device((state, ids, ids), compiler.device))
    program, flops = compiled_figures(lowered, compiler, Path(cfg.cache_dir))
    what = f"UMT5 on 1 x {tcfg.text_len} tokens, {jnp.dtype(param_dtype).name} weights"
    return PhaseProgram(program, flops, 1.0, what)


def _compile_decoder(cfg: EvalConfig, compiler: TpuCompiler) -> PhaseProgram:
    """``decode_unclipped``'s program on the largest tile, float32 weights as the run loads them."""
    config = vae_config(cfg)
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(vae)
    video = cfg.resolution.video
    (h, w), calls = decode_tiles(cfg)
    z = jax.ShapeDtypeStruct((1, video.latent_frames, h, w, config.z_dim), jnp.float32)
    lowered = _decode_split.lower(graphdef, *on_device((state, z), compiler.device))
    program, flops = compiled_figures(lowered, compiler, Path(cfg.cache_dir))
    scale = config.scale_factor_spatial
    what = (
        f"one {h * scale} x {w * scale}-pixel tile of {video.latent_frames} latent frames, "
        f"float32 weights, {calls:.0f} tile windows"
        if calls != 1.0 or cfg.model.name not in TINY_PRESETS
        else f"the whole {h * scale} x {w * scale} latent, float32 weights"
    )
    return PhaseProgram(program, flops, calls, what)


def compiled_figures(
    lowered: jax.stages.Lowered, compiler: TpuCompiler, cache_dir: Path
) -> tuple[CompiledProgram, float]:
    """A lowered program's compiled figures and FLOPs, from ``<cache_dir>/chip_programs/`` when
    the same program was compiled by the same compiler before (its ``compile_s`` is then the
    first compile's), else compiled now and kept there."""
    key = hashlib.sha256(f"{compiler.describe()}\n{lowered.as_text()}".encode()).hexdigest()
    path = cache_dir / "chip_programs" / f"{key[:32]}.json"
    kept = _read_kept(path)
    if kept is not None:
        return kept
    compiled, program = compile_program(lowered.compile)
    flops = _flops(compiled)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**dataclasses.asdict(program), "flops": flops}))
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the next dry run this compile
        pass
    return program, flops


def _read_kept(path: Path) -> tuple[CompiledProgram, float] | None:
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
        flops = float(raw.pop("flops"))
        return CompiledProgram(**raw), flops
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _flops(compiled: jax.stages.Compiled) -> float:
    """XLA's FLOP count of a compiled program (0 when its backend gives none)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else {}
    return float((analysis or {}).get("flops", 0.0))


def with_compiled_phases(
    table: MemoryTable, phases: Mapping[str, PhaseProgram], described: str
) -> MemoryTable:
    """``table`` with its text-encoder and VAE rows the compiler's: each phase's program peak
    (arguments with the weights, output, temporaries, code) on the chip that runs it."""
    rows = {c: dict(r) for c, r in table.rows.items()}
    notes = dict(table.notes)
    for phase, component in PHASE_ROWS.items():
        if phase not in phases or component not in rows:
            continue
        compiled = phases[phase]
        rows[component] = dict.fromkeys(rows[component], compiled.program.peak_bytes)
        notes[component] = _phase_note(phase, compiled, described)
    return dataclasses.replace(table, rows=rows, notes=notes)


def _phase_note(phase: str, compiled: PhaseProgram, described: str) -> str:
    program = compiled.program
    when = (
        "while encoding a prompt (released before the loop)"
        if phase == "encode"
        else "while decoding (after the loop)"
    )
    return (
        f"peak {when}: {compiled.what}, compiled by {described} (weights and inputs "
        f"{program.argument_bytes / GIB:.2f} GiB, temporaries {program.temp_bytes / GIB:.2f}, "
        f"output {program.output_bytes / GIB:.2f}, code {program.code_bytes / GIB:.3f})"
    )


def phases_for_chip(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    chip: ChipCompile,
    model_memory: MemoryTable,
    problems: list[str],
) -> tuple[MemoryTable, dict[str, PhaseProgram], CompiledWork | None]:
    """The run's memory table, its phase programs and what the time table takes from the chip's
    compiler: with the loops compiled, their table with the phases ``chip_compile_phases`` names
    compiled too (a phase not compiled keeps our row), and every compile's seconds; with nothing
    compiled, our model's table. A phase's refusal is appended to ``problems``."""
    if chip.memory is None or chip.compiler is None:
        return model_memory, {}, None
    described = chip.compiler.describe()
    phases: dict[str, PhaseProgram] = {}
    try:
        phases = compile_phases(cfg, tcfg, chip.compiler)
    except Exception as error:  # noqa: BLE001 - the compiler's refusal (HBM), in one line
        problems.append(
            f"compile for {described}: the text encoder or the VAE decode does not "
            f"compile ({compiler_reason(error)}); lower param_dtype (bfloat16) or the resolution"
        )
    loops = {arm: step.program for arm, step in chip.steps.items()}
    memory = with_compiled_phases(chip.memory, phases, described)
    return memory, phases, compiled_work(loops, phases, described)


def compiled_work(
    loops: Mapping[str, CompiledProgram],
    phases: Mapping[str, PhaseProgram],
    described: str,
) -> CompiledWork | None:
    """The chip compiler's FLOPs of the phases it compiled and every compile's seconds on this
    machine (None when nothing was compiled).

    Args:
        loops: arm -> its compiled loop's figures (empty when the loops were not compiled).
        phases: ``compile_phases``' programs (those ``chip_compile_phases`` names).
        described: the compiler, in words.
    """
    if not loops and not phases:
        return None
    seconds = {arm: program.compile_s for arm, program in loops.items()}
    seconds["shared"] = sum(p.program.compile_s for p in phases.values())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return CompiledWork(
        encode_flops=phases["encode"].total_flops if "encode" in phases else None,
        decode_flops=phases["decode"].total_flops if "decode" in phases else None,
        compile_s=seconds,
        compiled_on=f"this machine ({os.cpu_count()} cores, load average {load:.1f})",
        compiled_by=described,
    )
