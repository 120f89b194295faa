"""The kernel table: B0, the run's dense controls, B1, B2, B3 on one attention call (seed Table 2
in spirit), on one backend; the tile statistics and synthetic inputs the other parts share."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evalharness.bench.backends import XLA, Backend
from evalharness.bench.timing import cpu_time_measures_compute, time_warm_ms
from kernels.executors.xla_blocksparse import visit_groups
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import VARIANTS, build_plan

# Peers given the same band-plus-sink mask as b1-b3 (TPU: JAX's splash with it as a lazy mask):
# compared with, never a dense baseline.
MASKED_PEERS = ("splash_band",)
# A fraction of ideal above this says the baseline ran slow (no kernel beats 1 / density).
IDEAL_CEILING = 1.0
SLOW_BASELINE = "baseline likely slow"


def random_qkv(tokens: int, heads: int, head_dim: int, dtype, seed: int = 0, batch: int = 1):
    """Standard-normal q, k, v of shape [batch, tokens, heads, head_dim] in ``dtype``."""
    keys = jax.random.split(jax.random.key(seed), 3)
    shape = (batch, tokens, heads, head_dim)
    return tuple(jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)


def plan_row(plan, backend: str = "xla") -> dict:
    """Tile statistics of a plan (``executed_pairs_fraction``: the work the kernel does).

    On "xla" also its visit groups (how the XLA scan batches tiles): ``scan_groups`` and
    ``wasted_fraction``, the padding share of the scan's tile products on top; None on the
    Pallas kernels, which visit tiles one by one.
    """
    sched = visit_groups(plan) if backend == "xla" else None
    return {
        "density": plan.density,
        "tiles_visited_fraction": plan.tiles_visited_fraction,
        "executed_pairs_fraction": plan.executed_pairs_fraction,
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
    batch: int = 1,
    head_dim: int,
    dtype,
    runs: int,
    variants: tuple[str, ...],
    backend: Backend = XLA,
) -> list[dict]:
    """Times each variant on the spatial SVG mask, round-robin in one process.

    Args:
        geometry, density: the token grid and the band's target kept fraction.
        block_sizes: tiles for b0-b3 (already checked against the backend by the caller).
        heads, batch, head_dim, dtype: q, k, v of [batch, tokens, heads, head_dim] in ``dtype``.
        runs: timed warm runs per variant.
        variants: the rows: b0-b3 and dense controls (mask-free executors).
        backend: where b0-b3 run; the dense controls follow its interpret mode.

    Returns:
        One dict per variant: timing, tile statistics, num_warps and num_stages (b0-b3), and
        :func:`add_speedups`'s speedups and fractions of ideal.
    """
    mask = band_for_density(geometry, density)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, dtype, batch=batch)
    rows, fns = [], {}
    for variant in variants:
        row = {"variant": variant}
        if variant in VARIANTS:
            plan = build_plan(mask, block_sizes, variant)
            fn = backend.sparse_fn(plan)
            row.update(plan_row(plan, backend.name))
            row.update(backend.launch(block_sizes.block_q, head_dim))
        elif variant in MASKED_PEERS:
            fn = backend.masked_peer_fn(mask)
            row.update(density=mask.density, masked_fraction=None, wasted_fraction=None)
            row.update(tiles_visited_fraction=None, executed_pairs_fraction=None, scan_groups=None)
        else:
            fn = backend.dense_fn(variant)
            # Every pair once: no tiles, no padding, no visit groups (zero on "xla", else None).
            xla = backend.name == "xla"
            row.update(density=1.0, tiles_visited_fraction=1.0, executed_pairs_fraction=1.0)
            row.update(masked_fraction=0.0, wasted_fraction=0.0 if xla else None)
            row["scan_groups"] = 0 if xla else None
        fns[variant] = lambda fn=fn: fn(q, k, v)
        rows.append(row)
    timings = time_warm_ms(fns, runs)
    for row in rows:
        row.update(timings[row["variant"]])
    # A GPU kernel interpreted on the CPU keeps the GPU's judgement: wall time only.
    cpu = cpu_time_measures_compute() and backend.name != "pallas_gpu"
    add_speedups(rows, mask.density, cpu=cpu)
    return rows


def _fastest(rows: list[dict], key: str) -> dict | None:
    """The row with the smallest ``key`` among ``rows`` that have it (None when none do)."""
    timed = [row for row in rows if row.get(key) is not None]
    return min(timed, key=lambda row: row[key]) if timed else None


def add_speedups(rows: list[dict], mask_density: float, cpu: bool = True) -> None:
    """Adds speedups, fractions of ideal and slow-baseline flags to timed rows, in place.

    The baseline is the fastest dense row that ran (B0 at the table's tiles or a dense control),
    chosen apart for wall-clock and CPU medians: ``speedup_vs_fastest_dense`` = baseline_ms /
    row_ms (``fastest_dense`` names it) and ``fraction_of_ideal`` = that x ``mask_density`` (the
    ideal being 1 / the mask's exact kept fraction); ``cpu_*`` likewise on CPU medians unless
    ``cpu`` is False (on a GPU the host's CPU time measures waiting). Beside them:
    ``speedup_vs_b0`` / ``fraction_of_ideal_vs_b0`` (what the checks use) and
    ``speedup_vs_dense`` / ``fraction_of_ideal_vs_dense`` against the first dense control (the
    run's dense arm). A fraction above ``IDEAL_CEILING`` would compute fewer pairs than the mask
    keeps, so the baseline ran slow: ``ideal_flag`` = ``SLOW_BASELINE`` (+ " (CPU)" when only
    the CPU fraction is above), else None. With a ``MASKED_PEERS`` row (splash given the same
    mask), ``speedup_vs_masked_peer`` = its median / the row's; it is never a baseline.

    Args:
        rows: dicts with "variant", "median_ms" and (optionally) "cpu_median_ms".
        mask_density: the exact mask's kept fraction.
        cpu: whether CPU medians are judged.
    """
    base = next((r for r in rows if r["variant"] == "b0"), None)
    controls = [r for r in rows if r["variant"] not in (*VARIANTS, *MASKED_PEERS)]
    dense = controls[0] if controls else None
    dense_rows = [r for r in rows if r["variant"] == "b0"] + controls
    peer = next((r for r in rows if r["variant"] in MASKED_PEERS), None)
    fastest = _fastest(dense_rows, "median_ms")
    cpu_fastest = _fastest(dense_rows, "cpu_median_ms") if cpu else None
    for row in rows:
        row["mask_density"] = mask_density
        if base is not None:
            row["speedup_vs_b0"] = base["median_ms"] / row["median_ms"]
            row["fraction_of_ideal_vs_b0"] = row["speedup_vs_b0"] * mask_density
            if cpu and row.get("cpu_median_ms") is not None and base.get("cpu_median_ms"):
                row["cpu_speedup_vs_b0"] = base["cpu_median_ms"] / row["cpu_median_ms"]
        if peer is not None:
            row["speedup_vs_masked_peer"] = peer["median_ms"] / row["median_ms"]
        if dense is not None:
            row["dense_control"] = dense["variant"]
            row["speedup_vs_dense"] = dense["median_ms"] / row["median_ms"]
            row["fraction_of_ideal_vs_dense"] = row["speedup_vs_dense"] * mask_density
        flags = []
        if fastest is not None:
            row["fastest_dense"] = fastest["variant"]
            row["speedup_vs_fastest_dense"] = fastest["median_ms"] / row["median_ms"]
            row["fraction_of_ideal"] = row["speedup_vs_fastest_dense"] * mask_density
            if row["fraction_of_ideal"] > IDEAL_CEILING:
                flags.append(SLOW_BASELINE)
        if cpu_fastest is not None and row.get("cpu_median_ms") is not None:
            row["cpu_fastest_dense"] = cpu_fastest["variant"]
            speedup = cpu_fastest["cpu_median_ms"] / row["cpu_median_ms"]
            row["cpu_speedup_vs_fastest_dense"] = speedup
            row["cpu_fraction_of_ideal"] = speedup * mask_density
            if row["cpu_fraction_of_ideal"] > IDEAL_CEILING and not flags:
                flags.append(SLOW_BASELINE + " (CPU)")
        row["ideal_flag"] = flags[0] if flags else None


def slow_baseline_notes(rows: list[dict]) -> list[str]:
    """One note per row whose fraction of ideal is above ``IDEAL_CEILING`` (``add_speedups``),
    naming the row, the fraction and its baseline."""
    notes = []
    for row in rows:
        for prefix, label in (("", "wall-clock"), ("cpu_", "CPU")):
            fraction = row.get(prefix + "fraction_of_ideal")
            if fraction is not None and fraction > IDEAL_CEILING:
                notes.append(
                    f"{row['variant']}: {fraction:.3g} of ideal ({label}) against "
                    f"{row[prefix + 'fastest_dense']} is above {IDEAL_CEILING:g}, which no "
                    f"kernel reaches: {SLOW_BASELINE}, not a result"
                )
    return notes


def tile_stats(geometry: TokenGeometry, density: float, block_sizes: BlockSizes) -> dict:
    """Tile statistics of the SVG mask at ``density`` and ``block_sizes`` (no timing): the grid,
    visited and masked tile fractions of B1-B3, executed pairs (visited tiles x tile area over
    N^2, padding included) and the B3 rounded density, JSON-ready."""
    mask = band_for_density(geometry, density)
    b2 = build_plan(mask, block_sizes, "b2")
    b3 = build_plan(mask, block_sizes, "b3", None)
    return {
        "frames": geometry.frames,
        "height": geometry.height,
        "width": geometry.width,
        "tokens": geometry.tokens,
        "tokens_per_frame": geometry.tokens_per_frame,
        "block_q": block_sizes.block_q,
        "block_kv": block_sizes.block_kv,
        "num_q_tiles": b2.num_q_tiles,
        "num_kv_tiles": b2.num_kv_tiles,
        "target_density": density,
        "half_width": mask.half_width,
        "density": mask.density,
        "tiles_visited_fraction": b2.tiles_visited_fraction,
        "executed_pairs_fraction": b2.executed_pairs_fraction,
        "b1_masked_fraction": 1.0,
        "b2_masked_fraction": b2.masked_fraction,
        "b3_tiles_visited_fraction": b3.tiles_visited_fraction,
        "b3_executed_pairs_fraction": b3.executed_pairs_fraction,
        "b3_masked_fraction": b3.masked_fraction,
        "b3_density": b3.density,
    }
