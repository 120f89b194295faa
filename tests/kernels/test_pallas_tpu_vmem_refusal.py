"""The Pallas TPU kernel's refusal of a scoped VMEM limit above the physical VMEM: it names no
single chip (the budget serves every TPU the kernel runs on) and says which setting to change."""

from __future__ import annotations

from kernels.executors.pallas_tpu_budget import (
    VMEM_AUTO_CAP_BYTES,
    VMEM_PHYSICAL_BYTES,
    check_tpu_budget,
)
from kernels.masks.band import PaddingMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan


def test_a_limit_above_physical_vmem_names_the_setting_and_no_single_chip():
    plan = build_plan(PaddingMask(1024), BlockSizes(256, 256), "b0")
    budget = check_tpu_budget(plan, "b0", 64, "bfloat16", vmem_limit_bytes=300_000_000)
    assert not budget.fits
    (problem,) = budget.problems
    assert "a v6e has" not in problem
    assert "v5e or v6e" in problem and f"{VMEM_PHYSICAL_BYTES // 2**20:.1f} MiB" in problem
    assert f"kernel.vmem_limit_bytes to at most {VMEM_AUTO_CAP_BYTES}" in problem
    # The largest limit the fix names fits.
    fixed = check_tpu_budget(plan, "b0", 64, "bfloat16", vmem_limit_bytes=VMEM_AUTO_CAP_BYTES)
    assert fixed.fits
