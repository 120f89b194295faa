"""Tile-size sweeps (seed Figure 7 in spirit): BQ at fixed BKV (xla, pallas_tpu), and a BQ x BKV
grid (pallas_gpu) whose refused tiles stay as rows saying why, so a gap is never silent."""

from __future__ import annotations

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.kernel_table import IDEAL_CEILING, SLOW_BASELINE, plan_row, random_qkv
from evalharness.bench.timing import time_warm_ms
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import VARIANTS, build_plan

# B0 (the per-tile baseline of the fraction of ideal), B2, B3: b1 masks every visit b0 computes.
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
    """Times ``variant`` (default B2: full/partial split, exact mask) for each BQ, every BQ
    checked and compiled first, then timed round-robin (``time_warm_ms``); one row per BQ with
    timing and tile statistics (q, k, v as in ``kernel_table``)."""
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype, batch=batch)
    rows, fns = [], {}
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
    """Times B0, B2 and B3 for every BQ x BKV ``backend`` accepts; records the others.

    Each tile's three variants run round-robin (``time_warm_ms``), so its fractions of ideal
    (1 / the exact mask's density, against B0 at the same tiles) compare runs under one load.
    q, k, v are as in ``kernel_table``; ``runs`` is per tile.

    Returns:
        One dict per (BQ, BKV), in grid order: "block_q", "block_kv", "num_warps",
        "num_stages", "refused" (None, or why: ``Backend.check_tiles`` or B3 rounding's
        tolerance), and for accepted tiles "{variant}_median_ms" / "_min_ms" / "_max_ms",
        "b2_/b3_fraction_of_ideal", "ideal_flag" (``SLOW_BASELINE`` when either is above 1.0,
        else None) and the B3 plan's "b3_tiles_visited_fraction", "b3_executed_pairs_fraction"
        and "b3_masked_fraction".
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
            timings = time_warm_ms({n: (lambda f=f: f(q, k, v)) for n, f in compiled.items()}, runs)
            for name, timing in timings.items():
                for key in ("median_ms", "min_ms", "max_ms"):
                    row[f"{name}_{key}"] = timing[key]
            for name in ("b2", "b3"):
                speedup = timings["b0"]["median_ms"] / timings[name]["median_ms"]
                row[f"{name}_fraction_of_ideal"] = speedup * mask.density
            above = any(row[f"{n}_fraction_of_ideal"] > IDEAL_CEILING for n in ("b2", "b3"))
            row["ideal_flag"] = SLOW_BASELINE if above else None
            for key in ("tiles_visited_fraction", "executed_pairs_fraction", "masked_fraction"):
                row[f"b3_{key}"] = getattr(plans["b3"], key)
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
    """Median latency (min-max bars) against masked-work share, one labelled point per row
    (keys ``{prefix}masked_fraction``, ``{prefix}median_ms`` ...), ``axes`` = (x label, y label,
    title), saved to the PNG ``path``; ``line`` joins the points (a one-parameter sweep)."""
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
    """B3 latency against B3's masked-work share, one point per accepted tile, saved as a PNG;
    False (and no file) when every tile was refused."""
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
