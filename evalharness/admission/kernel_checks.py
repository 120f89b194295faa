"""The kernels' own limits on a target: Pallas TPU SMEM/VMEM and Pallas GPU shared memory.

``evalharness.admission.sizing`` calls these for a target; what does not fit goes to the sizing's
problems with the setting to change, what was not checked to its notes.
"""

from __future__ import annotations

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
from models.config import WanTransformerConfig
from models.dtypes import dtype_of


def tpu_budgets(
    cfg: EvalConfig, tcfg: WanTransformerConfig, policy: AttentionPolicy
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
        dense_plan = build_plan(PaddingMask(cfg.resolution.video.tokens), blocks, "b0")
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
