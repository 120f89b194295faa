"""The kernels' own limits on a target: Pallas TPU SMEM/VMEM, Pallas GPU shared memory, and the
lowering (``jax.export``) of every arm's attention for an accelerator seen from another platform.

``evalharness.admission.sizing`` calls these for a target; each adds what does not fit to the
sizing's problems with the setting to change, and what was not checked to its notes.
"""

from __future__ import annotations

from typing import Any

import jax

from evalharness.admission import compile_check
from evalharness.admission.run_timing import arm_executors
from evalharness.config import EvalConfig
from evalharness.estimates import DeviceTarget
from kernels.executors.pallas_gpu_budget import (
    DEFAULT_NUM_STAGES,
    check_gpu_tiles,
    shared_memory_bytes,
)
from kernels.executors.pallas_tpu_budget import TpuBudget, check_tpu_budget
from kernels.masks.band import PaddingMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from kernels.policy.attention_policy import AttentionPolicy
from kernels.registry import PLATFORMS
from models.config import WanTransformerConfig
from models.dtypes import dtype_of
from models.video_geometry import VideoGeometry

# jax.export platform names of the targets' platforms (those a plan is lowered for from here).
EXPORT_PLATFORMS = {p.name: p.export_platform for p in PLATFORMS.values() if p.export_platform}


def tpu_budgets(
    cfg: EvalConfig, tcfg: WanTransformerConfig, video: VideoGeometry, policy: AttentionPolicy
) -> dict[str, TpuBudget]:
    """SMEM/VMEM of every Pallas TPU plan the run executes: the sparse band and any B0."""
    kernel = cfg.kernel
    options = dict(
        head_dim=tcfg.attention_head_dim,
        dtype=dtype_of(cfg.dtype),
        block_kv_compute=kernel.block_kv_compute,
        vmem_limit_bytes=kernel.vmem_limit_bytes,
    )
    budgets = {}
    if policy.plan is not None:
        budgets[f"sparse {policy.plan.variant}"] = check_tpu_budget(
            policy.plan, policy.plan.variant, **options
        )
    executors = {kernel.dense_executor.value, kernel.noise_floor_executor.value}
    if "b0" in executors:
        blocks = BlockSizes(kernel.block_q, kernel.block_kv)
        dense_plan = build_plan(PaddingMask(video.tokens), blocks, "b0")
        budgets["B0 dense"] = check_tpu_budget(dense_plan, "b0", **options)
    return budgets


def gpu_shared_memory(
    cfg: EvalConfig,
    tcfg: WanTransformerConfig,
    target: DeviceTarget,
    problems: list[str],
    notes: list[str],
) -> int | None:
    """Shared memory of one Pallas GPU program (its tiles serve the sparse band and B0 alike);
    tiles over the target's limit become a problem naming tiles that fit."""
    kernel = cfg.kernel
    if kernel.backend.value != "pallas_gpu" or target.platform != "gpu":
        return None
    if target.shared_memory_bytes is None:
        notes.append(
            f"the Pallas GPU tiles were not checked against shared memory: {target.name}'s is not "
            "in the device table (evalharness/targets.py)"
        )
        return None
    tiles = (kernel.block_q, kernel.block_kv, tcfg.attention_head_dim, cfg.dtype.value)
    try:
        check_gpu_tiles(*tiles, kernel.num_stages, limit_bytes=target.shared_memory_bytes)
    except ValueError as error:
        problems.append(f"shared memory: {error}")
    return shared_memory_bytes(*tiles, kernel.num_stages or DEFAULT_NUM_STAGES)


def lower_for_target(
    cfg: EvalConfig,
    target: DeviceTarget,
    attends: dict[str, Any],
    qkv: jax.ShapeDtypeStruct,
    policy: AttentionPolicy,
    lower: bool,
    problems: list[str],
    notes: list[str],
) -> dict[str, float]:
    """Exports every arm's attention for an accelerator target seen from another platform (on a
    GPU target, all but cuDNN: ``compile_check.exportable_arms``)."""
    host = jax.devices()[0].platform
    platform = EXPORT_PLATFORMS.get(target.platform)
    if not lower or platform is None or target.platform == host or problems:
        if lower and problems and platform is not None:
            notes.append("lowering skipped: the plan already does not fit")
        return {}
    executors = arm_executors(cfg)
    describe = {**executors, "sparse": f"schedule {cfg.schedule.name}"}
    arms = compile_check.exportable_arms(attends, executors, policy, notes)
    try:
        return compile_check.check_attention_paths(
            arms,
            qkv,
            compile_check.first_sparse_layer(policy.schedule, policy.num_layers),
            describe,
            platform=platform,
            disabled_checks=disabled_checks(cfg.kernel.backend.value, platform),
        )
    except compile_check.CompileRefusal as refusal:
        problems.append(f"lowering: {refusal}")
        return {}


def disabled_checks(backend: str, platform: str) -> tuple[jax.export.DisabledSafetyCheck, ...]:
    """The export checks the Pallas GPU kernel's Triton custom call needs disabled for "cuda"."""
    if backend != "pallas_gpu" or platform != "cuda":
        return ()
    try:
        from kernels.executors.pallas_gpu import CUDA_EXPORT_DISABLED_CHECKS
    except ImportError:  # the export itself then fails with the dispatch's message
        return ()
    return tuple(CUDA_EXPORT_DISABLED_CHECKS)
