"""Tile-size sweep (seed Figure 7 in spirit): BQ values at fixed BKV, latency vs masked work."""

from __future__ import annotations

import jax

from evalharness.bench.inputs import random_qkv
from evalharness.bench.kernel_table import plan_row
from evalharness.bench.timing import time_call
from kernels.executors.dispatch import attention
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan


def block_q_sweep(
    geometry: TokenGeometry,
    density: float,
    block_kv: int,
    block_qs: tuple[int, ...],
    *,
    heads: int,
    head_dim: int,
    dtype,
    runs: int,
    variant: str = "b2",
) -> list[dict]:
    """Times ``variant`` (default B2: full/partial split, exact mask) for each BQ.

    Returns:
        One dict per BQ with timing and tile statistics.
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype)
    rows = []
    for block_q in block_qs:
        block_sizes = BlockSizes(block_q, block_kv)
        block_sizes.validate(geometry.tokens)
        plan = build_plan(mask, block_sizes, variant)
        fn = jax.jit(lambda q, k, v, plan=plan: attention(q, k, v, plan, variant=None))
        row = {"variant": variant, "block_q": block_q, "block_kv": block_kv, **plan_row(plan)}
        row.update(time_call(lambda fn=fn: fn(q, k, v), runs))
        rows.append(row)
    return rows


def plot_sweep(rows: list[dict], path: str) -> None:
    """Latency against masked-work share, one point per BQ, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [100 * r["masked_fraction"] for r in rows]
    ys = [r["median_ms"] for r in rows]
    errors = [
        [y - r["min_ms"] for y, r in zip(ys, rows, strict=True)],
        [r["max_ms"] - y for y, r in zip(ys, rows, strict=True)],
    ]
    ax.errorbar(xs, ys, yerr=errors, fmt="o-")
    for x, y, r in zip(xs, ys, rows, strict=True):
        ax.annotate(f"BQ={r['block_q']}", (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("visited tiles needing a mask (%)")
    ax.set_ylabel("median latency (ms)")
    ax.set_title(f"{rows[0]['variant'].upper()} BQ sweep, BKV={rows[0]['block_kv']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
