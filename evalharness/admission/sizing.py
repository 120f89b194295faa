"""The sizing of one comparison on one device target: memory, time, Pallas budgets, lowering.

("Plan" is kept for the kernels' tile plans; a run is *sized*.) :func:`size_run` is what preflight
and the dry run share. From the resolved config and a target (this host, or ``tpu-v6e-8`` /
``h200`` / ... from a CPU machine) it builds the arms' attention on one device's shapes
(host-side plans only), the per-device memory table (``evalharness.estimates.memory_estimate``:
abstract weights, compiled block, executor temporaries, routing, text encoder and VAE peaks), the
roofline time estimate (``evalharness.estimates.workload``), the SMEM/VMEM budget of every Pallas TPU plan or the shared memory of the Pallas GPU tiles, and, for
accelerator targets seen from another platform, the ``jax.export`` lowering of every arm's
attention that lowers without the device (all on TPU; on GPU all but cuDNN). Nothing real is
allocated: no weight, no N x N array.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.admission.chip_compile import compile_run_for_chip
from evalharness.admission.kernel_checks import gpu_shared_memory, lower_for_target, tpu_budgets
from evalharness.admission.phase_compile import PhaseProgram, compiled_work, phases_for_chip
from evalharness.admission.run_timing import (
    CompiledWork,
    arm_executors,
    decode_tiles,
    samples_per_call,
    sparse_work,
    text_encoder_config,
    time_of,
    vae_config,
)
from evalharness.admission.step_compile import StepProgram
from evalharness.assembly import kernel_options
from evalharness.config import EvalConfig, token_geometry
from evalharness.estimates import (
    DeviceTarget,
    ExecutorSpec,
    HostMemory,
    MemoryTable,
    SparseWork,
    TimeEstimate,
    attention_shape,
    compiled_temp_bytes,
    estimate_memory,
    size_host,
)
from evalharness.formatting import markdown_table
from kernels.executors.dense_memory import dense_executor_temp_bytes, grows_quadratically
from kernels.executors.pallas_tpu_budget import TpuBudget
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy, make_dense_attend
from models.config import SEEDED_PRESETS, WanTransformerConfig
from models.dtypes import dtype_of
from models.peak_memory import umt5_peak_bytes, vae_decode_peak_bytes
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunSizing:
    """What a comparison needs on a target, and whether it fits.

    Attributes:
        target: the device target.
        devices: P, devices the sequence is split over.
        batch: samples per model call (2 with joint classifier-free guidance, 1 with
            ``guidance_passes=separate`` or without guidance).
        memory: the per-device memory table.
        timing: the roofline time estimate per arm.
        budgets: Pallas TPU SMEM/VMEM budget per plan ("sparse b3", "B0 dense", ...).
        lowering: seconds per arm of the lowering (export) or host compile that ran.
        problems: every reason besides memory the run cannot go ahead (device count, SMEM/VMEM,
            shared memory, lowering); memory is ``memory.fits``.
        notes: what was not checked, and why.
        gpu_shared_memory: estimated shared memory of one Pallas GPU program in bytes (backend
            ``pallas_gpu`` on a target whose shared memory is known), else None.
        compiled_by: the chip's compiler when ``memory`` is its plan (e.g. ``TPU v6 lite 2x4 by
            libtpu 0.0.42.1``), else None.
        model_memory: our model's table, beside the compiler's (None when ``memory`` is ours).
        not_compiled: why a TPU target was not compiled for the chip (libtpu missing, ...).
        steps: arm -> its denoising loop as compiled for the chip (``chip_compile=step``).
        sparse: what the sparse arm executes (None for a dense schedule).
        phases: the text encoder's (``encode``) and the VAE decode's (``decode``) programs as
            compiled for the chip (empty when the chip's compiler did not run).
        host: the host's memory on an accelerator target (None on a CPU, whose memory table is
            the host's).
    """

    target: DeviceTarget
    devices: int
    batch: int
    memory: MemoryTable
    timing: TimeEstimate
    budgets: dict[str, TpuBudget]
    lowering: dict[str, float]
    problems: list[str]
    notes: list[str]
    gpu_shared_memory: int | None = None
    compiled_by: str | None = None
    model_memory: MemoryTable | None = None
    not_compiled: str | None = None
    steps: Mapping[str, StepProgram] = dataclasses.field(default_factory=dict)
    sparse: SparseWork | None = None
    phases: Mapping[str, PhaseProgram] = dataclasses.field(default_factory=dict)
    host: HostMemory | None = None

    @property
    def fits(self) -> bool:
        """Memory, SMEM/VMEM and lowering all pass (the time limit is checked by preflight)."""
        return self.memory.fits and not self.problems

    def budget_markdown(self) -> str:
        """The SMEM/VMEM table of the Pallas TPU plans ('' when there are none)."""
        if not self.budgets:
            return ""
        rows = [
            {
                "plan": name,
                "SMEM KiB": b.smem_bytes / 1024,
                "SMEM limit KiB": b.smem_limit / 1024,
                "VMEM MiB": b.vmem_bytes / 2**20,
                "VMEM limit MiB": b.vmem_limit / 2**20,
                "fits": "yes" if b.fits else "NO",
            }
            for name, b in self.budgets.items()
        ]
        columns = [(k, k, "{:,.1f}" if k not in ("plan", "fits") else "{}") for k in rows[0]]
        return markdown_table(rows, columns)

    def as_metrics(self) -> dict[str, float]:
        """The memory, time and budget figures as ``memory.*``, ``time.*``, ``tpu.*``, ``gpu.*``
        metrics."""
        out = {**self.memory.as_metrics(), **self.timing.as_metrics()}
        if self.gpu_shared_memory is not None:
            out["gpu.shared_memory_bytes"] = float(self.gpu_shared_memory)
        for name, budget in self.budgets.items():
            key = name.replace(" ", "_")
            out[f"tpu.{key}.smem_bytes"] = float(budget.smem_bytes)
            out[f"tpu.{key}.vmem_bytes"] = float(budget.vmem_bytes)
        return out


def size_run(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    *,
    devices: int,
    lower: bool = True,
    compile_arms: Collection[str] = (),
) -> RunSizing:
    """Plans ``cfg`` (resolved for ``target.platform``) on ``target`` without allocating anything.

    Args:
        cfg: the run's config, resolved (``platform_choices.resolve``) for the target's platform.
        tcfg: the transformer architecture.
        target: where it would run.
        devices: P, devices the sequence is split over.
        lower: export every arm's attention for the target platform when it is not this host's
            (catches Pallas-to-Mosaic and Pallas-to-Triton errors on a CPU machine).
        compile_arms: arms whose attention is compiled into the planned blocks on this host (the
            compiler's bytes replace the executor model); only when the target is this host.

    Returns:
        The plan; ``problems`` lists every reason it does not fit.
    """
    video = cfg.resolution.video
    batch = samples_per_call(cfg)
    attends, policy = _single_device_attends(cfg, tcfg, video)
    dtype = dtype_of(cfg.dtype)
    call = attention_shape(
        tcfg, batch=batch, tokens=video.tokens, devices=devices, dtype_bytes=dtype.itemsize
    )
    qkv = call.abstract(dtype)  # one device's q (= k = v) after the all-to-all
    specs = _executor_specs(cfg, policy, attends, qkv, compile_arms)
    model_memory = _model_memory(cfg, tcfg, video, target, batch, devices, compile_arms, specs)
    problems, notes = _device_problems(target, devices), []
    budgets = (
        tpu_budgets(cfg, tcfg, video, policy) if cfg.kernel.backend.value == "pallas_tpu" else {}
    )
    # With the chip's compiler Mosaic judges the tiles; without it, our budget model does.
    chip = compile_run_for_chip(
        cfg, tcfg, video, target, devices, model_memory, specs, attends, budgets, problems
    )
    notes += [chip.not_compiled, *chip.notes] if chip.not_compiled else chip.notes
    memory, phases, compiled = _whole_run_on_chip(cfg, tcfg, video, chip, model_memory, problems)
    sparse = sparse_work(cfg, tcfg, policy)
    timing = time_of(cfg, tcfg, video, target, devices, sparse, compiled)
    shared = gpu_shared_memory(cfg, tcfg, target, problems, notes)
    # Compiling for the chip lowered every arm already (Mosaic included): no export on top.
    lower = lower and chip.compiled_by is None
    lowering = lower_for_target(cfg, target, attends, qkv, policy, lower, problems, notes)
    host = _host_memory(cfg, tcfg, video, target, problems)
    return RunSizing(
        target,
        devices,
        batch,
        memory,
        timing,
        budgets,
        lowering,
        problems,
        notes,
        shared,
        compiled_by=chip.compiled_by,
        model_memory=model_memory if chip.memory is not None else None,
        not_compiled=chip.not_compiled,
        steps=chip.steps,
        sparse=sparse,
        phases=phases,
        host=host,
    )


def _whole_run_on_chip(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    video: VideoGeometry,
    chip: Any,
    model_memory: MemoryTable,
    problems: list[str],
) -> tuple[MemoryTable, dict[str, PhaseProgram], CompiledWork | None]:
    """The memory table, the phase programs and what the time table takes from the compiler:
    with the loops compiled for the chip, their table with the phases ``chip_compile_phases``
    names compiled too (the text encoder by default; a phase not compiled keeps our row) and
    every compile's seconds; nothing compiled, our model's table."""
    if chip.memory is None:
        return model_memory, {}, None
    memory, phases = phases_for_chip(cfg, tcfg, video, chip.compiler, chip.memory, problems)
    loops = {arm: step.program for arm, step in chip.steps.items()}
    return memory, phases, compiled_work(loops, phases, chip.compiled_by or "")


def estimate_run_time(
    cfg: EvalConfig, tcfg: WanTransformerConfig, target: DeviceTarget, *, devices: int
) -> tuple[TimeEstimate, SparseWork | None]:
    """The time estimate of ``cfg`` (resolved for ``target.platform``) alone, and what its sparse
    arm executes: no memory table, no compile (``evalharness.bench.seed_calibration``)."""
    video = cfg.resolution.video
    _, policy = _single_device_attends(cfg, tcfg, video)
    sparse = sparse_work(cfg, tcfg, policy)
    return time_of(cfg, tcfg, video, target, devices, sparse), sparse


def _model_memory(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    video: VideoGeometry,
    target: DeviceTarget,
    batch: int,
    devices: int,
    compile_arms: Collection[str],
    executors: Mapping[str, ExecutorSpec],
) -> MemoryTable:
    """Our model's memory table of the run on ``target`` (``estimate_memory``), the arms'
    ``executors`` given."""
    return estimate_memory(
        tcfg,
        video,
        batch=batch,
        devices=devices,
        param_dtype=cfg.model.param_dtype.value,
        dtype=cfg.dtype.value,
        executors=executors,
        text_encoder_bytes=_text_encoder_bytes(cfg, tcfg),
        vae_bytes=_vae_bytes(cfg, video),
        device_bytes=target.hbm_bytes,
        placement=cfg.parallel.permute_placement.value,
        device=target.name,
        target_platform=None if compile_arms else target.platform,
        runtime_overhead=target.runtime_overhead,
    )


def _single_device_attends(
    cfg: EvalConfig, tcfg: WanTransformerConfig, video: VideoGeometry
) -> tuple[dict[str, Any], AttentionPolicy]:
    """Each arm's attention as one device runs it after the head exchange (no mesh needed)."""
    kernel, executors = cfg.kernel, arm_executors(cfg)
    options = {
        "backend": kernel.backend.value,
        "block_sizes": BlockSizes(kernel.block_q, kernel.block_kv),
        "options": kernel_options(cfg),
    }
    dense = make_dense_attend(executors["dense"], **options)
    floor = make_dense_attend(executors["noise_floor"], **options)
    policy = AttentionPolicy(
        cfg.schedule,
        token_geometry(video),
        num_steps=cfg.steps,
        num_layers=tcfg.num_layers,
        dense_attend=dense,
        seed=cfg.seed,
        **options,
    )
    attends = {"dense": dense, "sparse": policy}
    if cfg.noise_floor:
        attends["noise_floor"] = floor
    return attends, policy


def _executor_specs(
    cfg: EvalConfig,
    policy: AttentionPolicy,
    attends: dict[str, Any],
    qkv: jax.ShapeDtypeStruct,
    compile_arms: Collection[str],
) -> dict[str, ExecutorSpec]:
    """Each arm's executor temporaries: a model per dense executor, the compiler's for XLA's sparse
    scan; the ``compile_arms`` have their own attention compiled into the blocks instead."""
    kernel = cfg.kernel
    backend = kernel.backend.value

    def temp(executor: str):
        return functools.partial(
            dense_executor_temp_bytes,
            executor,
            block_q=kernel.block_q,
            block_kv=kernel.block_kv,
            backend=backend,
        )

    dense_name = kernel.dense_executor.value
    specs = {"dense": ExecutorSpec(dense_name, temp(dense_name))}
    if "noise_floor" in attends:
        floor = kernel.noise_floor_executor.value
        specs["noise_floor"] = ExecutorSpec(floor, temp(floor))
    sparse = cfg.schedule.sparse and policy.plan is not None
    if not sparse:
        band_temp: Any = temp(dense_name)
    elif backend == "xla":
        band_temp = compiled_temp_bytes(policy.execute_band, qkv, qkv, qkv)
    else:  # a Pallas kernel keeps its softmax state on chip: its HBM temporaries are b0's copies
        band_temp = temp("b0")
    specs["sparse"] = ExecutorSpec(
        policy.plan.variant if sparse else dense_name,
        band_temp,
        routed=sparse,
        routing_samples=cfg.schedule.routing_samples,
        dense_name=dense_name,
        dense_temp_bytes=temp(dense_name),
        fuses_layout=backend == "xla",
    )
    return {
        arm: dataclasses.replace(spec, attend=attends[arm]) if arm in compile_arms else spec
        for arm, spec in specs.items()
    }


def quadratic_arms(cfg: EvalConfig) -> tuple[str, ...]:
    """The arms whose executor grows as N^2: XLA's buffer assignment for them inside the model
    differs most from the executor alone, so a run on this host compiles them into the plan."""
    executors = arm_executors(cfg)
    dense_arms = ("dense", "noise_floor") if cfg.noise_floor else ("dense",)
    return tuple(arm for arm in dense_arms if grows_quadratically(executors[arm]))


def _host_memory(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    video: VideoGeometry,
    target: DeviceTarget,
    problems: list[str],
) -> HostMemory | None:
    """The host's memory on an accelerator target (None on a CPU, whose memory table is the
    host's); a host too small adds to ``problems``."""
    if target.platform == "cpu":
        return None
    host = size_host(
        target.name,
        tcfg,
        text_encoder_config(cfg),
        video,
        arms=3 if cfg.noise_floor else 2,
        reads_checkpoint=cfg.model.name not in SEEDED_PRESETS,
    )
    problem = host.problem()
    problems += [problem] if problem else []
    return host


def _text_encoder_bytes(cfg: EvalConfig, tcfg: WanTransformerConfig) -> int:
    config = text_encoder_config(cfg)
    param_dtype = dtype_of(cfg.model.param_dtype)
    return umt5_peak_bytes(config, param_dtype, tcfg.text_len, 1)


def _vae_bytes(cfg: EvalConfig, video: VideoGeometry) -> int:
    """The VAE's decode peak: its largest call (the whole latent for the tiny presets, one tile
    for Wan models)."""
    hw, _ = decode_tiles(cfg, video)
    return vae_decode_peak_bytes(vae_config(cfg), hw, video.latent_frames, param_dtype=jnp.float32)


def _device_problems(target: DeviceTarget, devices: int) -> list[str]:
    """A sequence split over more devices than the target has."""
    problems = []
    if devices > target.devices:
        problems.append(
            f"parallel.sequence={devices} exceeds the {target.devices} device(s) of {target.name}; "
            f"use parallel.sequence={target.devices} or a larger target"
        )
    return problems
