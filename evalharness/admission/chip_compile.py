"""Compiled for the chip: a TPU target's memory from the real TPU compiler, our model beside it.

For a TPU target seen from a machine without a TPU, with libtpu installed, XLA's TPU compiler
and Mosaic (``evalharness.estimates.tpu_compiler``) compile, as ``chip_compile`` says:

``step`` (default): each arm's whole denoising loop, every layer, on the target's chips with
the sequence-parallel mesh and its all-to-all (``evalharness.admission.step_compile``); with the
layers scanned that takes about as long as a 2-layer forward did, so the loop is the only program
compiled. That memory table is the one the verdict reads, and our model's table (XLA:CPU's plan and our
executor arithmetic) is kept beside it. A program the compiler refuses (Mosaic's SMEM/VMEM, or
HBM) is a problem of the run, in one line. Without libtpu, or with ``chip_compile=off``,
nothing is compiled and the verdict says so: no silent downgrade.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evalharness.admission.heartbeat import heartbeat
from evalharness.admission.mosaic_fix import fitting_setting, mosaic_vmem_refusal
from evalharness.admission.step_compile import (
    StepProgram,
    compile_run_step,
    describe_collectives,
    step_memory_table,
)
from evalharness.assembly import host_platform
from evalharness.config import EvalConfig
from evalharness.estimates import (
    DeviceTarget,
    ExecutorSpec,
    MemoryTable,
    TpuCompiler,
    TpuCompilerUnavailable,
    compiler_reason,
    gpu_topology_compiler,
    topology_compiler,
)
from kernels.executors.pallas_tpu_budget import TpuBudget
from models.config import WanTransformerConfig
from models.video_geometry import VideoGeometry

# What to change when Mosaic or the TPU compiler refuses an arm's attention.
_SETTINGS = (
    "change the tiles (kernel.block_q, kernel.block_kv), kernel.block_kv_compute or "
    "kernel.vmem_limit_bytes, or the executor (kernel.dense_executor, kernel.noise_floor_executor)"
)
# What to change when the transformer itself does not compile (HBM).
_SMALLER = (
    "lower the resolution, the batch (guidance_passes=separate) or the devices' share "
    "(parallel.sequence)"
)
# Signs that a refusal came from a Pallas kernel (Mosaic), not from the transformer.
_KERNEL_SIGNS = ("mosaic", "vmem", "smem", "pallas")


@dataclass(frozen=True)
class ChipCompile:
    """What the compile for the chip gave.

    Attributes:
        compiled_by: e.g. ``TPU v6 lite 2x4 by libtpu 0.0.42.1`` when the TPU compiler ran.
        memory: the compiler's memory table (None when it did not run or refused).
        not_compiled: why the chip's compiler did not run (None when it ran or does not apply).
        notes: our budget model's refusals that Mosaic overruled, and what was compiled.
        steps: arm -> its compiled denoising loop (``chip_compile=step``; empty otherwise).
        compiler: the compile-only topology that compiled (None when nothing was compiled).
    """

    compiled_by: str | None = None
    memory: MemoryTable | None = None
    not_compiled: str | None = None
    notes: tuple[str, ...] = ()
    steps: Mapping[str, StepProgram] = dataclasses.field(default_factory=dict)
    compiler: TpuCompiler | None = None


def compile_for_chip(
    target: DeviceTarget,
    executors: Mapping[str, ExecutorSpec],
    attends: Mapping[str, object],
    problems: list[str],
    budget_problems: list[str],
    *,
    mode: str,
    step: Callable[[TpuCompiler, object], StepProgram],
    model_table: MemoryTable,
    precheck: Callable[[TpuCompiler], list[str]] | None = None,
) -> ChipCompile:
    """Compiles each arm for ``target``'s chips; Mosaic, not our SMEM/VMEM model, then judges the
    Pallas kernels' tiles.

    Args:
        target: the device target (a TPU target with a ``topology``; others are not compiled).
        executors: arm -> its ``ExecutorSpec`` (the model's).
        attends: arm -> its single-device attention.
        problems: the problems found so far (a plan with any is not compiled); appended with
            the compiler's refusal, or with ``budget_problems`` when nothing was compiled.
        budget_problems: what our SMEM/VMEM model refuses; when the chip's compiler runs, Mosaic
            decides instead and these become notes.
        mode: ``step`` or ``off`` (``ChipCompileMode``).
        step: ``step(compiler, attend)`` compiles one arm's denoising loop.
        model_table: our model's table, whose rows outside the loop the compiled table keeps.
        precheck: ``precheck(compiler)``: refusals found in seconds before the long compile
            (Mosaic on each Pallas kernel at a short sequence, each with a setting Mosaic
            compiles); any stops the compile.

    Returns:
        The ``ChipCompile``.
    """
    compiler, skipped = _compiler_for(target, problems, mode)
    if compiler is None:
        problems.extend(budget_problems)
        return ChipCompile(not_compiled=skipped)
    from kernels.executors.pallas_tpu import mosaic_judges_budget

    described = compiler.describe()
    early = precheck(compiler) if precheck is not None else []
    if early:
        problems.extend(early)
        return ChipCompile(compiled_by=described)
    try:
        with mosaic_judges_budget():
            table, steps = _compile_steps(
                compiler, step, executors, attends, model_table, target, problems
            )
    except TpuCompilerUnavailable as why:  # this machine lacks a library the compile needs
        problems.extend(budget_problems)
        return ChipCompile(not_compiled=f"not compiled for the chip: {why}")
    if table is None:
        return ChipCompile(compiled_by=described)
    overruled = tuple(
        f"our SMEM/VMEM model refused ({p}), but Mosaic compiled it for {described}: Mosaic's "
        "verdict stands"
        for p in budget_problems
    )
    what = (
        f"compiled for {described}: each arm's whole denoising loop ({describe_collectives(steps)})"
    )
    return ChipCompile(described, table, None, (what, *overruled), steps, compiler)


def _compile_steps(
    compiler: TpuCompiler,
    step: Callable[[TpuCompiler, object], StepProgram],
    executors: Mapping[str, ExecutorSpec],
    attends: Mapping[str, object],
    model_table: MemoryTable,
    target: DeviceTarget,
    problems: list[str],
) -> tuple[MemoryTable | None, dict[str, StepProgram]]:
    """Each arm's whole denoising loop compiled (an arm whose executor an earlier arm has is
    not compiled twice); the table from them, or None when one is refused."""
    described = compiler.describe()
    steps: dict[str, StepProgram] = {}
    by_executor: dict[str, StepProgram] = {}
    for arm, spec in executors.items():
        reuse = not spec.routed and spec.name in by_executor
        try:
            if reuse:
                steps[arm] = by_executor[spec.name]
            else:
                with heartbeat(f"the {arm} arm's denoising loop for {described}"):
                    steps[arm] = step(compiler, attends[arm])
        except Exception as error:  # noqa: BLE001 - Mosaic's or XLA's refusal, named with its arm
            if "cudnn not found" in str(error).lower():
                raise TpuCompilerUnavailable(
                    f"the {arm} arm's cuDNN attention needs the cuDNN library to compile: pip "
                    "install -e '.[gpu-compile]' brings it"
                ) from error
            reason = compiler_reason(error)
            text = f"{reason} {error}".lower()
            kernel = any(sign in text for sign in _KERNEL_SIGNS)
            part = f"its {spec.name} attention" if kernel else "the transformer"
            problems.append(
                f"compile for {described}: the {arm} arm's denoising loop does not compile "
                f"({part}: {reason}); {_SETTINGS if kernel else _SMALLER}"
            )
            return None, steps
        if not spec.routed:
            by_executor[spec.name] = steps[arm]
    names = {arm: model_table.executors.get(arm, spec.name) for arm, spec in executors.items()}
    names = {arm: name.replace(", compiled", "") for arm, name in names.items()}
    table = step_memory_table(
        steps,
        executors=names,
        model=model_table,
        runtime_overhead=target.runtime_overhead,
        described=described,
    )
    return table, steps


def _compiler_for(
    target: DeviceTarget, problems: list[str], mode: str
) -> tuple[TpuCompiler | None, str | None]:
    """The chip's compile-only compiler, or None and why not (None, None: does not apply)."""
    if target.platform not in ("tpu", "gpu") or target.topology is None:
        return None, None
    if host_platform() == target.platform:  # on the target itself its compiler is the host's
        return None, None
    if mode == "off":
        return None, "not compiled for the chip: chip_compile=off (our model's table)"
    if problems:
        return None, "not compiled for the chip: the plan already does not fit"
    try:
        if target.platform == "gpu":
            return gpu_topology_compiler(target.topology), None
        return topology_compiler(target.topology), None
    except TpuCompilerUnavailable as why:
        return None, f"not compiled for the chip: {why}"


def compile_run_for_chip(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    video: VideoGeometry,
    target: DeviceTarget,
    devices: int,
    model_memory: MemoryTable,
    specs: dict[str, ExecutorSpec],
    attends: dict[str, Any],
    budgets: dict[str, TpuBudget],
    problems: list[str],
) -> ChipCompile:
    """``compile_for_chip`` for a run (``model_memory``: our model's table); ``problems``
    gets the compiler's refusal, or our budget model's when nothing is compiled.

    Args:
        cfg: the run's config, resolved for the target's platform.
        tcfg: the transformer architecture.
        video: the video size.
        target: the device target.
        devices: P, chips the sequence is split over.
        model_memory: our model's table (its rows outside the loop are kept).
        specs: arm -> its ``ExecutorSpec``.
        attends: arm -> its single-device attention.
        budgets: our SMEM/VMEM model's budget per Pallas TPU plan.
        problems: appended with what does not fit.

    Returns:
        The ``ChipCompile``.
    """
    budget_problems = [p for b in budgets.values() for p in b.problems]

    def step(compiler: Any, attend: Any) -> StepProgram:
        return compile_run_step(cfg, tcfg, video, compiler, devices, attend)

    def vmem_fix(compiler: Any, variant: str) -> str:
        kernel = cfg.kernel
        return fitting_setting(
            compiler.device,
            variant=variant,
            tiles=(kernel.block_q, kernel.block_kv),
            tokens=video.tokens,
            head_dim=tcfg.attention_head_dim,
            dtype=cfg.dtype.value,
            block_kv_compute=kernel.block_kv_compute,
            vmem_limit=kernel.vmem_limit_bytes,
        )

    return compile_for_chip(
        target,
        specs,
        attends,
        problems,
        budget_problems,
        mode=cfg.chip_compile.value,
        step=step,
        model_table=model_memory,
        precheck=functools.partial(_mosaic_precheck, cfg, tcfg, target, budgets, vmem_fix),
    )


def _mosaic_precheck(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    budgets: Mapping[str, TpuBudget],
    vmem_fix: Callable[[TpuCompiler, str], str],
    compiler: TpuCompiler,
) -> list[str]:
    """Mosaic's VMEM refusal of each Pallas TPU kernel the run uses, found in seconds (a short
    sequence), each with a setting Mosaic compiles."""
    kernel = cfg.kernel
    if target.platform != "tpu" or kernel.backend.value != "pallas_tpu":
        return []
    found = []
    for variant in sorted({_plan_variant(name) for name in budgets}):
        reason = mosaic_vmem_refusal(
            compiler.device,
            variant=variant,
            tiles=(kernel.block_q, kernel.block_kv),
            head_dim=tcfg.attention_head_dim,
            dtype=cfg.dtype.value,
            block_kv_compute=kernel.block_kv_compute,
            vmem_limit=kernel.vmem_limit_bytes,
        )
        if reason is not None:
            found.append(
                f"compile for {compiler.describe()}: Mosaic refuses the {variant} kernel's "
                f"tiles {kernel.block_q}x{kernel.block_kv} ({reason}; checked in seconds at a "
                f"short sequence: its VMEM does not grow with N). Checked with Mosaic: "
                f"{vmem_fix(compiler, variant)}"
            )
    return found


def _plan_variant(budget_name: str) -> str:
    """The kernel variant of a ``tpu_budgets`` entry ("sparse b3" -> b3, "B0 dense" -> b0)."""
    return budget_name.split()[-1] if budget_name.startswith("sparse") else "b0"
