"""The kernel table: B0, dot_product_attention, B1, B2, B3 on one geometry (seed Table 2 in spirit)."""

from __future__ import annotations

import jax

from evalharness.bench.inputs import random_qkv
from evalharness.bench.timing import time_interleaved
from kernels.executors.dispatch import attention
from kernels.executors.xla_blocksparse import visit_groups
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

TABLE_VARIANTS = ("b0", "dot_product_attention", "b1", "b2", "b3")


def plan_row(plan) -> dict:
    """Tile statistics of a plan plus the padding share of its XLA visit groups."""
    sched = visit_groups(plan)
    return {
        "density": plan.density,
        "tiles_visited_fraction": plan.tiles_visited_fraction,
        "masked_fraction": plan.masked_fraction,
        "wasted_fraction": sched.wasted_fraction,
        "scan_groups": len(sched.groups),
    }


def kernel_table(
    geometry: TokenGeometry,
    density: float,
    block_sizes: BlockSizes,
    *,
    heads: int,
    head_dim: int,
    dtype,
    runs: int,
    variants: tuple[str, ...] = TABLE_VARIANTS,
) -> list[dict]:
    """Times each variant on the spatial SVG mask (XLA backend).

    Args:
        geometry: token geometry.
        density: target kept fraction.
        block_sizes: tiles for b0-b3.
        heads: attention heads.
        head_dim: head dimension.
        dtype: input dtype.
        runs: timed warm runs per variant.
        variants: which rows to run.

    Returns:
        One dict per variant: timing, tile statistics, speedup over B0, fraction of ideal.
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype)
    rows = []
    fns = {}
    for variant in variants:
        row = {"variant": variant}
        if variant == "dot_product_attention":
            fn = jax.jit(lambda q, k, v: attention(q, k, v, variant="dot_product_attention"))
            row.update(density=1.0, tiles_visited_fraction=1.0, masked_fraction=0.0)
            row.update(wasted_fraction=0.0, scan_groups=0)
        else:
            plan = build_plan(mask, block_sizes, variant)
            fn = jax.jit(lambda q, k, v, plan=plan: attention(q, k, v, plan, variant=None))
            row.update(plan_row(plan))
        fns[variant] = lambda fn=fn: fn(q, k, v)
        rows.append(row)
    # Round-robin over the variants: drift on a shared machine affects every row alike.
    timings = time_interleaved(fns, runs)
    for row in rows:
        row.update(timings[row["variant"]])
    base = next((r for r in rows if r["variant"] == "b0"), None)
    for row in rows:
        if base is not None:
            row["speedup_vs_b0"] = base["median_ms"] / row["median_ms"]
            row["cpu_speedup_vs_b0"] = base["cpu_median_ms"] / row["cpu_median_ms"]
            # Ideal speedup is 1 / (exact kept fraction of the SVG mask) for every sparse row.
            row["fraction_of_ideal"] = row["speedup_vs_b0"] * mask.density
            row["cpu_fraction_of_ideal"] = row["cpu_speedup_vs_b0"] * mask.density
        row["mask_density"] = mask.density
    return rows
