"""``python -m evalharness.bench``: the kernel benchmark.

Usage:
    python -m evalharness.bench [run] [--frames 21 --height 24 --width 32] [--json] ...
        kernel table (B0, dot_product_attention, B1, B2, B3), BQ sweep (+ PNG), temporal-head
        comparison, compiled peak memory at --memory-resolution, acceptance checks.
    python -m evalharness.bench tiles --resolution 720p --density 0.3887 --block-q 3328 \
        --block-kv 1536 --json
        tile statistics only (no timing), one JSON object.

Timings are wall-clock medians of warm runs (compile excluded) with process CPU time beside them,
because the benchmark machine may be shared with other work.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp

from evalharness.bench.kernel_table import kernel_table
from evalharness.bench.machine import machine_info
from evalharness.bench.memory import compiled_peak_bytes
from evalharness.bench.report import (
    KERNEL_TABLE_COLUMNS,
    MEMORY_COLUMNS,
    SWEEP_COLUMNS,
    TEMPORAL_COLUMNS,
    record_table,
    table,
)
from evalharness.bench.sweep import block_q_sweep, plot_sweep
from evalharness.bench.temporal import temporal_comparison
from evalharness.bench.tile_stats import tile_stats
from evalharness.resolutions import load_resolution, resolution_names
from kernels.executors.dispatch import attention
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
PARTS = ("table", "sweep", "temporal", "memory")
# Without a resolution or a token grid: 21 x 768 = 16,128 tokens, quick to time on a CPU.
_DEFAULT_GRID = (21, 24, 32)


def _geometry(args: argparse.Namespace) -> TokenGeometry:
    explicit = (args.frames, args.height, args.width)
    if args.resolution is not None:
        if any(x is not None for x in explicit):
            raise SystemExit("give either --resolution or --frames/--height/--width, not both")
        return load_resolution(args.resolution).tokens
    if any(x is None for x in explicit):
        raise SystemExit("give --resolution or all of --frames, --height, --width (in tokens)")
    return TokenGeometry(*explicit)


def _parser() -> argparse.ArgumentParser:
    presets = resolution_names()
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", nargs="?", default="run", choices=("run", "tiles"))
    parser.add_argument("--resolution", choices=presets, help="a preset of conf/resolution")
    parser.add_argument("--frames", type=int, help="latent frames F")
    parser.add_argument("--height", type=int, help="token rows Hp")
    parser.add_argument("--width", type=int, help="token columns Wp")
    parser.add_argument("--density", type=float, default=0.39)
    parser.add_argument("--block-q", type=int, default=768)
    parser.add_argument("--block-kv", type=int, default=768)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sweep-block-q", default="256,768,1536,2688", help="comma-separated BQ")
    parser.add_argument("--plot", default="kernel_bq_sweep.png", help="PNG path for the sweep")
    parser.add_argument(
        "--memory-resolution", default="480p", choices=presets, help="preset for the memory check"
    )
    parser.add_argument("--skip", default="", help="comma-separated: " + ",".join(PARTS))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    return parser


def _tiles(args: argparse.Namespace) -> int:
    """The ``tiles`` command: tile statistics of one geometry and tile size, no timing."""
    stats = tile_stats(_geometry(args), args.density, BlockSizes(args.block_q, args.block_kv))
    stats["machine"] = machine_info()
    if args.json:
        print(json.dumps(stats))
    else:
        print(record_table({k: v for k, v in stats.items() if k != "machine"}))
    return 0


def _memory(geometry: TokenGeometry, density: float, block_sizes: BlockSizes, args) -> list[dict]:
    dtype = _DTYPES[args.dtype]
    shape = jax.ShapeDtypeStruct((1, geometry.tokens, args.heads, args.head_dim), dtype)
    mask = band_for_density(geometry, density)
    rows = []
    for variant in ("b0", "b1", "b2", "b3", "dot_product_attention"):
        if variant == "dot_product_attention":
            fn = lambda q, k, v: attention(q, k, v, variant=variant)  # noqa: B023
        else:
            plan = build_plan(mask, block_sizes, variant)
            fn = lambda q, k, v, plan=plan: attention(q, k, v, plan, variant=None)
        peak = compiled_peak_bytes(fn, shape, shape, shape)
        rows.append({"variant": variant, "tokens": geometry.tokens, "peak_gib": peak / 2**30})
    return rows


def _checks(table: list[dict], memory: list[dict]) -> dict[str, bool]:
    """Acceptance checks on wall-clock medians, and the same on process CPU medians.

    The CPU-time versions are there because the benchmark machine may be shared: other processes
    stretch wall time unevenly across rows, while CPU seconds of this process are less disturbed.
    """
    by = {r["variant"]: r for r in table}
    checks = {}
    for key, suffix in (("median_ms", ""), ("cpu_median_ms", "_cpu")):
        if {"b0", "b1", "b2", "b3"} <= by.keys():
            speedup = by["b0"][key] / by["b3"][key]
            ideal = 1.0 / by["b3"]["mask_density"]
            checks["b3_at_least_0.95_of_ideal" + suffix] = speedup >= 0.95 * ideal
            checks["b3_fastest_of_b1_b3" + suffix] = by["b3"][key] <= min(
                by["b1"][key], by["b2"][key]
            )
            checks["b2_not_slower_than_b1" + suffix] = by["b2"][key] <= by["b1"][key]
        if {"b0", "dot_product_attention"} <= by.keys():
            checks["b0_not_slower_than_dpa" + suffix] = (
                by["b0"][key] <= by["dot_product_attention"][key]
            )
    if memory:
        checks["blocksparse_peak_under_4gib"] = all(
            r["peak_gib"] < 4 for r in memory if r["variant"] != "dot_product_attention"
        )
    return checks


def _config(args: argparse.Namespace, geometry: TokenGeometry) -> dict:
    """What was benchmarked, recorded with the results."""
    return {
        "frames": geometry.frames,
        "height": geometry.height,
        "width": geometry.width,
        "tokens": geometry.tokens,
        "target_density": args.density,
        "density": band_for_density(geometry, args.density).density,
        "block_q": args.block_q,
        "block_kv": args.block_kv,
        "runs": args.runs,
        "heads": args.heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
    }


def _measure(args: argparse.Namespace, geometry: TokenGeometry, block_sizes: BlockSizes) -> dict:
    """Runs every part not in ``--skip``; returns the results keyed by part."""
    skip = set(filter(None, args.skip.split(",")))
    common = {"heads": args.heads, "head_dim": args.head_dim, "dtype": _DTYPES[args.dtype]}
    timed = {**common, "runs": args.runs}
    result = {}
    if "table" not in skip:
        print("running kernel table ...", file=sys.stderr, flush=True)
        result["kernel_table"] = kernel_table(geometry, args.density, block_sizes, **timed)
    if "sweep" not in skip:
        print("running BQ sweep ...", file=sys.stderr, flush=True)
        block_qs = tuple(int(x) for x in args.sweep_block_q.split(","))
        result["bq_sweep"] = block_q_sweep(geometry, args.density, args.block_kv, block_qs, **timed)
        if args.plot:
            plot_sweep(result["bq_sweep"], args.plot)
            result["bq_sweep_plot"] = args.plot
    if "temporal" not in skip:
        print("running temporal comparison ...", file=sys.stderr, flush=True)
        result["temporal"] = temporal_comparison(geometry, args.density, block_sizes, **timed)
    if "memory" not in skip:
        print("compiling for memory analysis ...", file=sys.stderr, flush=True)
        mem_geometry = load_resolution(args.memory_resolution).tokens
        result["memory"] = _memory(mem_geometry, args.density, block_sizes, args)
    return result


def format_report(result: dict, block_kv: int) -> str:
    """The results as Markdown: machine and config, one table per part that ran, the checks."""
    parts = [f"machine: {result['machine']}", f"config: {result['config']}\n"]
    sections = (
        ("kernel_table", "## Kernel table (XLA backend)", KERNEL_TABLE_COLUMNS),
        ("bq_sweep", f"## BQ sweep at BKV={block_kv} (B2)", SWEEP_COLUMNS),
        ("temporal", "## Temporal heads (B2, exact mask)", TEMPORAL_COLUMNS),
        ("memory", "## Compiled peak memory", MEMORY_COLUMNS),
    )
    for key, heading, columns in sections:
        if key in result:
            parts += [heading + "\n", table(result[key], columns) + "\n"]
    parts += ["## Checks\n", record_table(result["checks"])]
    return "\n".join(parts)


def _emit(result: dict, args: argparse.Namespace) -> None:
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_report(result, args.block_kv))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "tiles":
        return _tiles(args)
    if args.resolution is None and args.frames is None:
        args.frames, args.height, args.width = _DEFAULT_GRID
    geometry = _geometry(args)
    block_sizes = BlockSizes(args.block_q, args.block_kv)
    block_sizes.validate(geometry.tokens)
    result = {"machine": machine_info(), "config": _config(args, geometry)}
    result.update(_measure(args, geometry, block_sizes))
    result["checks"] = _checks(result.get("kernel_table", []), result.get("memory", []))
    _emit(result, args)
    return 0


def _cli() -> int:
    try:
        return main()
    except ValueError as error:  # bad sizes, densities, tiles: say what, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
