"""The sizing of one comparison on one device target: memory, time, Pallas budgets, lowering.

("Plan" is kept for the kernels' tile plans; a run is *sized*.) :func:`size_run` is what preflight
and the dry run share: for this host, or a target such as ``tpu-v6e-8`` or ``h200`` seen from a CPU
machine, it builds each arm's attention at one device's shapes (host-side plans only), the
per-device memory table (``evalharness.estimates.estimate_memory``, or the chip's compiler's:
``chip_compile``), the time estimate (``run_timing``), the Pallas kernels' own limits
(``kernel_checks``) and the ``jax.export`` lowering of every arm that lowers without the device
(``compile_check``). Nothing real is allocated: no weight, no N x N array.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.admission.chip_compile import ChipCompile, compile_run_for_chip
from evalharness.admission.compile_check import lower_for_target
from evalharness.admission.kernel_checks import gpu_shared_memory, tpu_budgets
from evalharness.admission.phase_compile import PhaseProgram, phases_for_chip
from evalharness.admission.run_timing import (
    arm_executors,
    decode_tiles,
    job_estimate,
    samples_per_call,
    sparse_work,
    text_encoder_config,
    time_of,
    vae_config,
)
from evalharness.assembly import kernel_options
from evalharness.config import EvalConfig, token_geometry
from evalharness.estimates import (
    DeviceTarget,
    ExecutorSpec,
    HostMemory,
    JobEstimate,
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
from kernels.policy.static_policy import make_policy
from models.config import WanTransformerConfig
from models.dtypes import dtype_of
from models.peak_memory import umt5_peak_bytes, vae_decode_peak_bytes, vae_tiled_decode_memory
from models.vae import decode_tiling


@dataclasses.dataclass
class RunSizing:
    """What a comparison needs on a target, and whether it fits.

    Attributes:
        target: the device target.
        devices: P, devices the sequence is split over.
        batch: samples per model call (2 with joint guidance passes, else 1).
        memory: the per-device memory table.
        timing: the roofline time estimate per arm.
        budgets: Pallas TPU SMEM/VMEM budget per plan ("sparse b3", "B0 dense", ...).
        lowering: seconds per arm of the export that ran.
        problems: every reason besides memory the run cannot go ahead (device count, SMEM/VMEM,
            shared memory, the compile, host memory); memory is ``memory.fits``.
        notes: what was not checked, and why.
        gpu_shared_memory: shared memory of one Pallas GPU program in bytes (``pallas_gpu`` on a
            target whose shared memory is known), else None.
        chip: what compiling for the target's chip gave (its compiler, loops, or why not).
        model_memory: our model's table, beside the compiler's (None when ``memory`` is ours).
        sparse: what the sparse arm executes (None for a dense schedule).
        phases: the text encoder's (``encode``) and VAE decode's (``decode``) programs compiled
            for the chip (empty when the chip's compiler did not run).
        host: the host's memory on an accelerator target (None on a CPU).
        estimate: the whole job's time, phase by phase (measured where it was, else the FLOP
            model's ``timing``): what preflight judges against ``max_minutes``.
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
    gpu_shared_memory: int | None
    chip: ChipCompile
    model_memory: MemoryTable | None
    sparse: SparseWork | None
    phases: Mapping[str, PhaseProgram]
    host: HostMemory | None
    estimate: JobEstimate = dataclasses.field(default_factory=JobEstimate)

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
        out.update(self.estimate.as_metrics())
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
    batch = samples_per_call(cfg)
    attends, policy = _single_device_attends(cfg, tcfg)
    dtype = dtype_of(cfg.dtype)
    tokens = cfg.resolution.video.tokens
    call = attention_shape(
        tcfg, batch=batch, tokens=tokens, devices=devices, dtype_bytes=dtype.itemsize
    )
    qkv = call.abstract(dtype)  # one device's q (= k = v) after the all-to-all
    specs = _executor_specs(cfg, policy, attends, qkv, compile_arms)
    model_memory = _model_memory(cfg, tcfg, target, batch, devices, compile_arms, specs)
    problems: list[str] = []
    if devices > target.devices:
        problems.append(
            f"parallel.sequence={devices} exceeds the {target.devices} device(s) of {target.name}; "
            f"use parallel.sequence={target.devices} or a larger target"
        )
    budgets = tpu_budgets(cfg, tcfg, policy) if cfg.kernel.backend.value == "pallas_tpu" else {}
    # With the chip's compiler Mosaic judges the tiles; without it, our budget model does.
    chip = compile_run_for_chip(
        cfg, tcfg, target, devices, model_memory, specs, attends, budgets, problems
    )
    notes = [chip.not_compiled, *chip.notes] if chip.not_compiled else list(chip.notes)
    memory, phases, compiled = phases_for_chip(cfg, tcfg, chip, model_memory, problems)
    sparse = sparse_work(cfg, tcfg, policy)
    timing = time_of(cfg, tcfg, target, devices, sparse, compiled)
    estimate = job_estimate(cfg, target, devices, timing)
    shared = gpu_shared_memory(cfg, tcfg, target, problems, notes)
    # Compiling for the chip lowered every arm already (Mosaic included): no export on top.
    lower = lower and chip.compiled_by is None
    lowering = lower_for_target(cfg, target, attends, qkv, policy, lower, problems, notes)
    host = _host_memory(cfg, tcfg, target, problems)
    return RunSizing(
        target,
        devices,
        batch,
        memory,
        timing,
        budgets,
        lowering,
        # Several plans (the sparse arm's, a dense control's) can fail for one reason: said once.
        list(dict.fromkeys(problems)),
        list(dict.fromkeys(notes)),
        shared,
        chip,
        model_memory if chip.memory is not None else None,
        sparse,
        phases,
        host,
        estimate,
    )


def estimate_run_time(
    cfg: EvalConfig, tcfg: WanTransformerConfig, target: DeviceTarget, *, devices: int
) -> tuple[TimeEstimate, SparseWork | None]:
    """The time estimate of ``cfg`` (resolved for ``target.platform``) alone, and what its sparse
    arm executes: no memory table, no compile (``evalharness.bench.seed_calibration``)."""
    _, policy = _single_device_attends(cfg, tcfg)
    sparse = sparse_work(cfg, tcfg, policy)
    return time_of(cfg, tcfg, target, devices, sparse), sparse


def _model_memory(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    batch: int,
    devices: int,
    compile_arms: Collection[str],
    executors: Mapping[str, ExecutorSpec],
) -> MemoryTable:
    """Our model's memory table of the run on ``target`` (``estimate_memory``), the arms'
    ``executors`` given."""
    video = cfg.resolution.video
    return estimate_memory(
        tcfg,
        video,
        batch=batch,
        devices=devices,
        param_dtype=cfg.model.param_dtype.value,
        dtype=cfg.dtype.value,
        executors=executors,
        text_encoder_bytes=umt5_peak_bytes(
            text_encoder_config(cfg), dtype_of(cfg.model.param_dtype), tcfg.text_len, 1
        ),
        vae_bytes=_vae_decode_bytes(cfg),
        device_bytes=target.hbm_bytes,
        placement=cfg.parallel.permute_placement.value,
        device=target.name,
        target_platform=None if compile_arms else target.platform,
        runtime_overhead=target.runtime_overhead,
    )


def _vae_decode_bytes(cfg: EvalConfig) -> int:
    """The decode program's peak: the whole latent's decode (tiny presets, or a latent within one
    tile), else the tiled program's (one window's decode, the row strip and the frames)."""
    video, config = cfg.resolution.video, vae_config(cfg)
    hw, calls = decode_tiles(cfg)
    if calls == 1.0 and hw == tuple(video.latent_shape()[-2:]):
        return vae_decode_peak_bytes(config, hw, video.latent_frames, param_dtype=jnp.float32)
    tiling = decode_tiling(cfg.model.name)
    full = tuple(video.latent_shape()[-2:])
    return vae_tiled_decode_memory(config, full, video.latent_frames, tiling).peak


def _single_device_attends(
    cfg: EvalConfig, tcfg: WanTransformerConfig
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
    policy = make_policy(
        cfg.schedule,
        token_geometry(cfg.resolution.video),
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
        # A static mask routes nothing; it changes layout only where it has one (STA's tiles).
        routing_samples=cfg.schedule.routing_samples if cfg.schedule.routes else 0,
        layout_change=policy.changes_layout,
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
        cfg.resolution.video,
        arms=3 if cfg.noise_floor else 2,
        reads_checkpoint=not cfg.model.seeded,
    )
    problem = host.problem()
    problems += [problem] if problem else []
    return host
