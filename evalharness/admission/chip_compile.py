"""Compiled for the chip: a TPU target's memory from the real TPU compiler, our model beside it.

For a TPU target seen from a machine without a TPU, with libtpu installed, the transformer (a
2-layer forward at one chip's shapes: embeddings, blocks, head) and every arm's attention inside
it are compiled for one chip of the target's topology by XLA's TPU compiler and Mosaic
(``evalharness.estimates.tpu_compiler``); that memory table is the one the verdict reads, and
the model's table (XLA:CPU's plan and our executor arithmetic) is kept beside it. A program the
compiler refuses (Mosaic's SMEM/VMEM, or HBM) is a problem of the run, in one line. Without
libtpu nothing is compiled and the verdict says so: no silent downgrade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax

from evalharness.estimates import (
    ArmCompileError,
    DeviceTarget,
    ExecutorSpec,
    MemoryTable,
    TpuCompiler,
    TpuCompilerUnavailable,
    compiler_reason,
    topology_compiler,
)

# What to change when Mosaic or the TPU compiler refuses an arm's attention.
_SETTINGS = (
    "change the tiles (kernel.block_q, kernel.block_kv), kernel.block_kv_compute or "
    "kernel.vmem_limit_bytes, or the executor (kernel.dense_executor, kernel.noise_floor_executor)"
)


@dataclass(frozen=True)
class ChipCompile:
    """What the compile for the chip gave.

    Attributes:
        compiled_by: e.g. ``TPU v6 lite 2x4 by libtpu 0.0.42.1`` when the TPU compiler ran.
        memory: the compiler's memory table (None when it did not run or refused).
        not_compiled: why the chip's compiler did not run (None when it ran or does not apply).
        notes: our budget model's refusals that Mosaic overruled.
    """

    compiled_by: str | None = None
    memory: MemoryTable | None = None
    not_compiled: str | None = None
    notes: tuple[str, ...] = ()


def compile_for_chip(
    target: DeviceTarget,
    estimate: Callable[..., MemoryTable],
    executors: Mapping[str, ExecutorSpec],
    attends: Mapping[str, object],
    problems: list[str],
    budget_problems: list[str],
) -> ChipCompile:
    """Compiles the transformer and each arm's attention for one chip of ``target``; Mosaic, not
    our SMEM/VMEM model, then judges the Pallas kernels' tiles.

    Args:
        target: the device target (a TPU target with a ``topology``; others are not compiled).
        estimate: ``estimate_memory`` with every argument but ``executors`` and
            ``compile_device`` given.
        executors: arm -> its ``ExecutorSpec`` (the model's).
        attends: arm -> its single-device attention, compiled into the transformer.
        problems: the problems found so far (a plan with any is not compiled); appended with
            the compiler's refusal, or with ``budget_problems`` when nothing was compiled.
        budget_problems: what our SMEM/VMEM model refuses; when the chip's compiler runs, Mosaic
            decides instead and these become notes.

    Returns:
        The ``ChipCompile``.
    """
    compiler, skipped = _compiler_for(target, problems)
    if compiler is None:
        problems.extend(budget_problems)
        return ChipCompile(not_compiled=skipped)
    from kernels.executors.pallas_tpu import mosaic_judges_budget

    compiled_arms = {
        arm: dataclasses.replace(spec, attend=attends[arm]) for arm, spec in executors.items()
    }
    described = compiler.describe()
    try:
        with mosaic_judges_budget():
            table = estimate(executors=compiled_arms, compile_device=compiler.device)
    except ArmCompileError as refusal:
        problems.append(
            f"compile for {described}: the {refusal.executor} attention does not compile "
            f"({refusal.reason}); {_SETTINGS}"
        )
        return ChipCompile(compiled_by=described)
    except Exception as error:  # noqa: BLE001 - the transformer itself refused (e.g. HBM)
        problems.append(
            f"compile for {described}: the transformer does not compile "
            f"({compiler_reason(error)}); lower the resolution, the batch "
            "(guidance_passes=separate) or the devices' share (parallel.sequence)"
        )
        return ChipCompile(compiled_by=described)
    overruled = tuple(
        f"our SMEM/VMEM model refused ({p}), but Mosaic compiled it for {described}: Mosaic's "
        "verdict stands"
        for p in budget_problems
    )
    return ChipCompile(compiled_by=described, memory=table, notes=overruled)


def _compiler_for(
    target: DeviceTarget, problems: list[str]
) -> tuple[TpuCompiler | None, str | None]:
    """The chip's compile-only compiler, or None and why not (None, None: does not apply)."""
    if target.platform != "tpu" or target.topology is None:
        return None, None
    if jax.devices()[0].platform == "tpu":  # on a TPU host the host's compiler is the chip's
        return None, None
    if problems:
        return None, "not compiled for the chip: the plan already does not fit"
    try:
        return topology_compiler(target.topology), None
    except TpuCompilerUnavailable as why:
        return None, f"not compiled for the chip: {why}"
