"""Compiled for the chip: a TPU or GPU target's memory from its own compiler, our model beside it.

Seen from a machine without the target's chips, with its compile-only toolchain installed (libtpu:
XLA's TPU compiler and Mosaic; the CUDA plugin: XLA's GPU compiler), ``chip_compile=step``
compiles each arm's whole denoising loop, every layer, on the target's chips with the
sequence-parallel mesh and its all-to-all (``step_compile``). That table is the one the verdict
reads; our model's (XLA:CPU's plan and our executor arithmetic) is kept beside it. A program the
compiler refuses (Mosaic's SMEM/VMEM, or HBM) is a problem of the run, in one line. Without the
toolchain, or with ``chip_compile=off``, nothing is compiled and the verdict says so: no silent
downgrade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalharness.admission.heartbeat import heartbeat
from evalharness.admission.mosaic_fix import mosaic_refusals
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
        compiled_by: e.g. ``TPU v6 lite 2x4 by libtpu 0.0.42.1`` when the chip's compiler ran.
        memory: the compiler's memory table (None when it did not run or refused).
        not_compiled: why the chip's compiler did not run (None when it ran or does not apply).
        notes: what was compiled, and our budget model's refusals that Mosaic overruled.
        steps: arm -> its compiled denoising loop (empty when nothing compiled).
        compiler: the compile-only topology that compiled (None when nothing was compiled).
    """

    compiled_by: str | None = None
    memory: MemoryTable | None = None
    not_compiled: str | None = None
    notes: tuple[str, ...] = ()
    steps: Mapping[str, StepProgram] = dataclasses.field(default_factory=dict)
    compiler: TpuCompiler | None = None


def compile_run_for_chip(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    devices: int,
    model_memory: MemoryTable,
    specs: dict[str, ExecutorSpec],
    attends: dict[str, Any],
    budgets: dict[str, TpuBudget],
    problems: list[str],
) -> ChipCompile:
    """Compiles each arm's denoising loop for ``target``'s chips; Mosaic, not our SMEM/VMEM
    model, then judges the Pallas kernels' tiles.

    Args:
        cfg: the run's config, resolved for the target's platform.
        tcfg: the transformer architecture.
        target: the device target (only a TPU or GPU target with a ``topology`` is compiled).
        devices: P, chips the sequence is split over.
        model_memory: our model's table (the compiled table keeps its rows outside the loop).
        specs: arm -> its ``ExecutorSpec``.
        attends: arm -> its single-device attention.
        budgets: our SMEM/VMEM model's budget per Pallas TPU plan; its refusals become notes
            when the chip's compiler runs (Mosaic decides), else problems.
        problems: the problems so far (a plan with any is not compiled); appended with the
            compiler's refusal, or our budget model's when nothing was compiled.

    Returns:
        The ``ChipCompile``.
    """
    budget_problems = [p for b in budgets.values() for p in b.problems]
    compiler, skipped = _compiler_for(target, problems, cfg.chip_compile.value)
    if compiler is None:
        problems.extend(budget_problems)
        return ChipCompile(not_compiled=skipped)
    from kernels.executors.pallas_tpu import mosaic_judges_budget

    described = compiler.describe()
    # Mosaic's VMEM refusals, found in seconds at a short sequence before the long compile.
    early = mosaic_refusals(cfg, tcfg, budgets, compiler) if target.platform == "tpu" else []
    if early:
        problems.extend(early)
        return ChipCompile(compiled_by=described)
    try:
        with mosaic_judges_budget():
            steps = _compile_steps(cfg, tcfg, compiler, devices, specs, attends, problems)
    except TpuCompilerUnavailable as why:  # this machine lacks a library the compile needs
        problems.extend(budget_problems)
        return ChipCompile(not_compiled=f"not compiled for the chip: {why}")
    if steps is None:
        return ChipCompile(compiled_by=described)
    table = step_memory_table(
        steps,
        executors={arm: model_memory.executors.get(arm, spec.name) for arm, spec in specs.items()},
        model=model_memory,
        runtime_overhead=target.runtime_overhead,
        described=described,
    )
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
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    compiler: TpuCompiler,
    devices: int,
    specs: Mapping[str, ExecutorSpec],
    attends: Mapping[str, Any],
    problems: list[str],
) -> dict[str, StepProgram] | None:
    """Each arm's whole denoising loop compiled (an unrouted arm reuses an earlier arm's program
    of the same executor), or None with the refusal appended to ``problems``."""
    described = compiler.describe()
    steps: dict[str, StepProgram] = {}
    by_executor: dict[str, StepProgram] = {}
    for arm, spec in specs.items():
        if not spec.routed and spec.name in by_executor:
            steps[arm] = by_executor[spec.name]
            continue
        try:
            with heartbeat(f"the {arm} arm's denoising loop for {described}"):
                steps[arm] = compile_run_step(cfg, tcfg, compiler, devices, attends[arm])
        except Exception as error:  # noqa: BLE001 - Mosaic's or XLA's refusal, named with its arm
            if "cudnn not found" in str(error).lower():
                raise TpuCompilerUnavailable(
                    f"the {arm} arm's cuDNN attention needs the cuDNN library to compile: pip "
                    "install -e '.[gpu-compile]' brings it"
                ) from error
            reason = compiler_reason(error)
            kernel = any(sign in f"{reason} {error}".lower() for sign in _KERNEL_SIGNS)
            part = f"its {spec.name} attention" if kernel else "the transformer"
            problems.append(
                f"compile for {described}: the {arm} arm's denoising loop does not compile "
                f"({part}: {reason}); {_SETTINGS if kernel else _SMALLER}"
            )
            return None
        if not spec.routed:
            by_executor[spec.name] = steps[arm]
    return steps


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
