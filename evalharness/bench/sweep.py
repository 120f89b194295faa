"""Tile-size sweeps (seed Figure 7 in spirit).

- ``block_q_sweep`` (xla, pallas_tpu): BQ values at fixed BKV, latency vs masked work, every BQ
  timed round-robin.
- ``tile_sweep`` (pallas_gpu): a BQ x BKV grid of Triton blocks, B0, B2 and B3 per tile timed
  round-robin, fraction of ideal per tile. Tiles the backend refuses (tile granularity, shared
  memory) are kept as rows saying why, so a gap in the grid is never silent.
"""

from __future__ import annotations

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.inputs import random_qkv
from evalharness.bench.kernel_table import (
    IDEAL_CEILING,
    SLOW_BASELINE,
    plan_row,
)
from evalharness.bench.timing import time_warm_ms
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import VARIANTS, build_plan

# Variants of the tile sweep: B0 is the per-tile baseline of the fraction of ideal.
# The tile plans whose speed depends on the tiles (b1 masks every visit, as b0 computes them).
TILE_SWEEP_VARIANTS = tuple(v for v in VARIANTS if v != "b1")
# Grid of the pallas_gpu sweep when none is given: powers of two around the 128 x 64 default.
GPU_SWEEP_BLOCK_Q = (64, 128, 256)
GPU_SWEEP_BLOCK_KV = (32, 64, 128)


def block_q_sweep(
    geometry: TokenGeometry,
    density: float,
    block_kv: int,
    block_qs: tuple[int, ...],
    *,
    heads: int,
    batch: int = 1,
    head_dim: int,
    dtype,
    runs: int,
    variant: str = "b2",
    backend: Backend = XLA,
) -> list[dict]:
    """Times ``variant`` (default B2: full/partial split, exact mask) for each BQ.

    Every BQ is checked and compiled first; then the BQs are timed round-robin
    (``time_warm_ms``: the run's timer), one run of each per round, so load drift hits every BQ alike.

    Returns:
        One dict per BQ with timing and tile statistics.
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype, batch=batch)
    rows = []
    fns = {}
    for block_q in block_qs:
        block_sizes = BlockSizes(block_q, block_kv)
        backend.check_tiles(block_sizes, geometry.tokens, head_dim, dtype)
        plan = build_plan(mask, block_sizes, variant)
        fn = backend.sparse_fn(plan)
        row = {"variant": variant, "block_q": block_q, "block_kv": block_kv}
        row.update(plan_row(plan, backend.name))
        fns[block_q] = lambda fn=fn: fn(q, k, v)
        rows.append(row)
    timings = time_warm_ms(fns, runs)
    for row in rows:
        row.update(timings[row["block_q"]])
    return rows


def tile_sweep(
    geometry: TokenGeometry,
    density: float,
    block_qs: tuple[int, ...],
    block_kvs: tuple[int, ...],
    *,
    heads: int,
    batch: int = 1,
    head_dim: int,
    dtype,
    runs: int,
    backend: Backend,
) -> list[dict]:
    """Times B0, B2 and B3 for every BQ x BKV the backend accepts; records the others.

    Each tile's three variants run round-robin (``time_warm_ms``: the run's timer), so a tile's fractions of
    ideal compare runs taken under the same load. The ideal is 1 / (the exact mask's density),
    against B0 at the same tiles.

    Args:
        geometry: token geometry.
        density: target kept fraction.
        block_qs: query tiles.
        block_kvs: key/value tiles.
        heads: attention heads.
        batch: samples per call (q, k, v are [batch, tokens, heads, head_dim]).
        head_dim: head dimension.
        dtype: input dtype.
        runs: timed rounds per tile.
        backend: where the kernels run (``Backend.check_tiles`` decides what is refused).

    Returns:
        One dict per (BQ, BKV), in grid order: "block_q", "block_kv", "num_warps", "num_stages",
        "refused" (None, or why: the backend's tile rules, or B3 rounding's tolerance), and for accepted tiles "{variant}_median_ms",
        "_min_ms", "_max_ms" per variant, "b2_/b3_fraction_of_ideal", "ideal_flag" (the
        kernel table's ``SLOW_BASELINE`` when either is above 1.0: B0 ran slow, else None) and
        the B3 plan's "b3_tiles_visited_fraction", "b3_executed_pairs_fraction" and
        "b3_masked_fraction".
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype, batch=batch)
    rows = []
    for block_q in block_qs:
        for block_kv in block_kvs:
            row: dict = {"block_q": block_q, "block_kv": block_kv}
            try:
                block_sizes = BlockSizes(block_q, block_kv)
                row.update(backend.launch(block_q, head_dim))
                backend.check_tiles(block_sizes, geometry.tokens, head_dim, dtype)
                # B3 rounding refuses tiles too coarse for the band (its tolerance), too.
                plans = {n: build_plan(mask, block_sizes, n) for n in TILE_SWEEP_VARIANTS}
            except ValueError as error:
                row["refused"] = str(error)
                rows.append(row)
                continue
            row["refused"] = None
            compiled = {name: backend.sparse_fn(plan) for name, plan in plans.items()}
            fns = {name: (lambda fn=fn: fn(q, k, v)) for name, fn in compiled.items()}
            timings = time_warm_ms(fns, runs)
            for name, timing in timings.items():
                for key in ("median_ms", "min_ms", "max_ms"):
                    row[f"{name}_{key}"] = timing[key]
            for name in ("b2", "b3"):
                speedup = timings["b0"]["median_ms"] / timings[name]["median_ms"]
                row[f"{name}_fraction_of_ideal"] = speedup * mask.density
            above = any(row[f"{n}_fraction_of_ideal"] > IDEAL_CEILING for n in ("b2", "b3"))
            row["ideal_flag"] = SLOW_BASELINE if above else None
            row["b3_tiles_visited_fraction"] = plans["b3"].tiles_visited_fraction
            row["b3_executed_pairs_fraction"] = plans["b3"].executed_pairs_fraction
            row["b3_masked_fraction"] = plans["b3"].masked_fraction
            rows.append(row)
    return rows


def _latency_plot(
    rows: list[dict],
    prefix: str,
    labels: list[str],
    axes: tuple[str, str, str],
    path: str,
    line: bool,
) -> None:
    """Median latency (min-max bars) against masked-work share, one labelled point per row.

    Args:
        rows: timed rows with ``{prefix}masked_fraction`` and ``{prefix}median_ms/min_ms/max_ms``.
        prefix: key prefix ("" or "b3_").
        labels: one annotation per row.
        axes: x label, y label, title.
        path: PNG path.
        line: join the points (a one-parameter sweep) or not (a grid).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [100 * r[f"{prefix}masked_fraction"] for r in rows]
    ys = [r[f"{prefix}median_ms"] for r in rows]
    errors = [
        [y - r[f"{prefix}min_ms"] for y, r in zip(ys, rows, strict=True)],
        [r[f"{prefix}max_ms"] - y for y, r in zip(ys, rows, strict=True)],
    ]
    ax.errorbar(xs, ys, yerr=errors, fmt="o-" if line else "o")
    for x, y, label in zip(xs, ys, labels, strict=True):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    ax.set_title(axes[2])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(rows: list[dict], path: str) -> None:
    """Latency against masked-work share, one point per BQ, saved as a PNG."""
    axes = (
        "visited tiles needing a mask (%)",
        "median latency (ms)",
        f"{rows[0]['variant'].upper()} BQ sweep, BKV={rows[0]['block_kv']}",
    )
    _latency_plot(rows, "", [f"BQ={r['block_q']}" for r in rows], axes, path, line=True)


def plot_tile_sweep(rows: list[dict], path: str) -> bool:
    """B3 latency against B3's masked-work share, one point per accepted tile, saved as a PNG.

    Returns:
        False (and no file) when every tile was refused.
    """
    timed = [r for r in rows if r.get("refused") is None]
    if not timed:
        return False
    labels = [f"{r['block_q']}x{r['block_kv']}" for r in timed]
    axes = (
        "B3 visited tiles needing a mask (%)",
        "B3 median latency (ms)",
        "B3 tile sweep (BQ x BKV)",
    )
    _latency_plot(timed, "b3_", labels, axes, path, line=False)
    return True
