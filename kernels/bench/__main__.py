"""``python -m kernels.bench``: the kernel benchmark.

Usage:
    python -m kernels.bench [run] [--frames 21 --height 24 --width 32] [--json] ...
        kernel table (B0, dot_product_attention, B1, B2, B3), BQ sweep (+ PNG), temporal-head
        comparison, compiled peak memory at --memory-resolution, acceptance checks.
    python -m kernels.bench tiles --resolution 720p --density 0.3887 --block-q 3328 \
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

from kernels.bench.kernel_table import kernel_table
from kernels.bench.machine import machine_info
from kernels.bench.memory import compiled_peak_bytes
from kernels.bench.report import TILE_COLUMNS, TIMING_COLUMNS, markdown_table
from kernels.bench.sweep import block_q_sweep, plot_sweep
from kernels.bench.temporal import temporal_comparison
from kernels.bench.tile_stats import tile_stats
from kernels.executors.dispatch import attention
from kernels.masks.band import band_for_density
from kernels.masks.geometry import RESOLUTION_PRESETS, TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _geometry(args: argparse.Namespace) -> TokenGeometry:
    explicit = (args.frames, args.height, args.width)
    if args.resolution is not None:
        if any(x is not None for x in explicit):
            raise SystemExit("give either --resolution or --frames/--height/--width, not both")
        return TokenGeometry.from_resolution(args.resolution)
    if any(x is None for x in explicit):
        raise SystemExit("give --resolution or all of --frames, --height, --width (in tokens)")
    return TokenGeometry(*explicit)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", nargs="?", default="run", choices=("run", "tiles"))
    parser.add_argument("--resolution", choices=sorted(RESOLUTION_PRESETS))
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
    parser.add_argument("--memory-resolution", default="480p", help="preset for the memory check")
    parser.add_argument("--skip", default="", help="comma-separated: table,sweep,temporal,memory")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    return parser


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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "tiles":
        geometry = _geometry(args)
        stats = tile_stats(geometry, args.density, BlockSizes(args.block_q, args.block_kv))
        stats["machine"] = machine_info()
        if args.json:
            print(json.dumps(stats))
        else:
            print(markdown_table([stats], [(k, k, 1) for k in stats if k != "machine"]))
        return 0
    if args.resolution is None and args.frames is None:
        args.frames, args.height, args.width = 21, 24, 32  # 21 x 768 = 16,128 tokens
    geometry = _geometry(args)
    block_sizes = BlockSizes(args.block_q, args.block_kv)
    block_sizes.validate(geometry.tokens)
    skip = set(filter(None, args.skip.split(",")))
    common = {"heads": args.heads, "head_dim": args.head_dim, "dtype": _DTYPES[args.dtype]}
    result = {
        "machine": machine_info(),
        "config": {
            "frames": geometry.frames,
            "height": geometry.height,
            "width": geometry.width,
            "tokens": geometry.tokens,
            "target_density": args.density,
            "density": band_for_density(geometry, args.density).density,
            "block_q": args.block_q,
            "block_kv": args.block_kv,
            "runs": args.runs,
            **{k: (args.dtype if k == "dtype" else v) for k, v in common.items()},
        },
    }
    log = sys.stderr if args.json else sys.stdout
    if "table" not in skip:
        print("running kernel table ...", file=sys.stderr, flush=True)
        result["kernel_table"] = kernel_table(
            geometry, args.density, block_sizes, runs=args.runs, **common
        )
    if "sweep" not in skip:
        print("running BQ sweep ...", file=sys.stderr, flush=True)
        block_qs = tuple(int(x) for x in args.sweep_block_q.split(","))
        result["bq_sweep"] = block_q_sweep(
            geometry, args.density, args.block_kv, block_qs, runs=args.runs, **common
        )
        if args.plot:
            plot_sweep(result["bq_sweep"], args.plot)
            result["bq_sweep_plot"] = args.plot
    if "temporal" not in skip:
        print("running temporal comparison ...", file=sys.stderr, flush=True)
        result["temporal"] = temporal_comparison(
            geometry, args.density, block_sizes, runs=args.runs, **common
        )
    if "memory" not in skip:
        print("compiling for memory analysis ...", file=sys.stderr, flush=True)
        mem_geometry = TokenGeometry.from_resolution(args.memory_resolution)
        result["memory"] = _memory(mem_geometry, args.density, block_sizes, args)
    result["checks"] = _checks(result.get("kernel_table", []), result.get("memory", []))
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"machine: {result['machine']}", file=log)
    print(f"config: {result['config']}\n", file=log)
    if "kernel_table" in result:
        print("## Kernel table (XLA backend)\n", file=log)
        cols = [("variant", "variant", 1), *TIMING_COLUMNS, *TILE_COLUMNS]
        cols += [("speedup_vs_b0", "speedup vs B0", 1), ("fraction_of_ideal", "of ideal", 1)]
        cols += [
            ("cpu_speedup_vs_b0", "CPU speedup", 1),
            ("cpu_fraction_of_ideal", "CPU of ideal", 1),
        ]
        print(markdown_table(result["kernel_table"], cols) + "\n", file=log)
    if "bq_sweep" in result:
        print(f"## BQ sweep at BKV={args.block_kv} (B2)\n", file=log)
        cols = [("block_q", "BQ", 1), *TIMING_COLUMNS, *TILE_COLUMNS]
        print(markdown_table(result["bq_sweep"], cols) + "\n", file=log)
    if "temporal" in result:
        print("## Temporal heads (B2, exact mask)\n", file=log)
        cols = [("path", "path", 1), *TIMING_COLUMNS, *TILE_COLUMNS]
        cols.append(("max_abs_difference_between_paths", "max |diff|", 1))
        print(markdown_table(result["temporal"], cols) + "\n", file=log)
    if "memory" in result:
        print("## Compiled peak memory\n", file=log)
        cols = [("variant", "variant", 1), ("tokens", "tokens", 1), ("peak_gib", "GiB", 1)]
        print(markdown_table(result["memory"], cols) + "\n", file=log)
    print("## Checks\n", file=log)
    print(markdown_table([result["checks"]], [(k, k, 1) for k in result["checks"]]), file=log)
    return 0


def _cli() -> int:
    try:
        return main()
    except ValueError as error:  # bad sizes, densities, tiles: say what, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
