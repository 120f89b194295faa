"""The kernel table: B0, the platform's dense control, B1, B2, B3 on one geometry (seed Table 2 in
spirit), on one backend."""

from __future__ import annotations

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.inputs import random_qkv
from evalharness.bench.timing import time_interleaved
from kernels.executors.xla_blocksparse import visit_groups
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import VARIANTS, build_plan

# The XLA backend's rows, in the order the table shows them (B0, its dense control, B1-B3).
TABLE_VARIANTS = ("b0", "dot_product_attention", "b1", "b2", "b3")


def table_variants(backend: Backend, with_dense_control: bool = True) -> tuple[str, ...]:
    """The rows of ``backend``'s table: B0, its dense control (unless dropped), B1, B2, B3."""
    control = (backend.dense_control,) if with_dense_control else ()
    return ("b0", *control, "b1", "b2", "b3")


def plan_row(plan, backend: str = "xla") -> dict:
    """Tile statistics of a plan, plus the padding share of its XLA visit groups on "xla".

    The visit groups (``wasted_fraction``, ``scan_groups``) are how the XLA path batches its
    tiles; the Pallas kernels visit tiles one by one, so there they are None rather than figures
    of a schedule that does not run.
    """
    sched = visit_groups(plan) if backend == "xla" else None
    return {
        "density": plan.density,
        "tiles_visited_fraction": plan.tiles_visited_fraction,
        "masked_fraction": plan.masked_fraction,
        "wasted_fraction": sched.wasted_fraction if sched else None,
        "scan_groups": len(sched.groups) if sched else None,
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
    backend: Backend = XLA,
) -> list[dict]:
    """Times each variant on the spatial SVG mask, round-robin in one process.

    Args:
        geometry: token geometry.
        density: target kept fraction.
        block_sizes: tiles for b0-b3 (already checked against the backend by the caller).
        heads: attention heads.
        head_dim: head dimension.
        dtype: input dtype.
        runs: timed warm runs per variant.
        variants: which rows to run: b0-b3 and dense controls (mask-free executors).
        backend: where b0-b3 run; the dense controls follow its interpret mode.

    Returns:
        One dict per variant: timing, tile statistics, num_warps/num_stages (b0-b3), speedup over
        B0 and over the dense control (the first dense row), fraction of ideal for both.
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype)
    rows = []
    fns = {}
    for variant in variants:
        row = {"variant": variant}
        if variant in VARIANTS:
            plan = build_plan(mask, block_sizes, variant)
            fn = backend.sparse_fn(plan)
            row.update(plan_row(plan, backend.name))
            row.update(backend.launch(block_sizes.block_q, head_dim))
        else:
            fn = backend.dense_fn(variant)
            row.update(density=1.0, tiles_visited_fraction=1.0, masked_fraction=0.0)
            # No XLA visit groups (see ``plan_row``): zero on "xla" as before, None elsewhere.
            xla = backend.name == "xla"
            row.update(wasted_fraction=0.0 if xla else None, scan_groups=0 if xla else None)
        fns[variant] = lambda fn=fn: fn(q, k, v)
        rows.append(row)
    # Round-robin over the variants: drift on a shared machine affects every row alike.
    timings = time_interleaved(fns, runs)
    for row in rows:
        row.update(timings[row["variant"]])
    add_speedups(rows, mask.density)
    return rows


def add_speedups(rows: list[dict], mask_density: float) -> None:
    """Adds speedups and fractions of ideal to timed rows, in place.

    Ideal speedup is 1 / (exact kept fraction of the SVG mask) for every sparse row, against B0
    and against the dense control alike (both compute every pair).

    Args:
        rows: dicts with "variant", "median_ms" and "cpu_median_ms".
        mask_density: the exact mask's kept fraction.
    """
    base = next((r for r in rows if r["variant"] == "b0"), None)
    dense = next((r for r in rows if r["variant"] not in VARIANTS), None)
    for row in rows:
        if base is not None:
            row["speedup_vs_b0"] = base["median_ms"] / row["median_ms"]
            row["cpu_speedup_vs_b0"] = base["cpu_median_ms"] / row["cpu_median_ms"]
            row["fraction_of_ideal"] = row["speedup_vs_b0"] * mask_density
            row["cpu_fraction_of_ideal"] = row["cpu_speedup_vs_b0"] * mask_density
        if dense is not None:
            row["dense_control"] = dense["variant"]
            row["speedup_vs_dense"] = dense["median_ms"] / row["median_ms"]
            row["fraction_of_ideal_vs_dense"] = row["speedup_vs_dense"] * mask_density
        row["mask_density"] = mask_density
