"""``python -m evalharness.bench``: the kernel benchmark.

Usage:
    python -m evalharness.bench [run] [--backend xla|pallas_tpu|pallas_gpu] [--interpret]
        [--resolution 720p | --frames 21 --height 24 --width 32] [--json] ...
        kernel table (B0, the platform's dense control, B1, B2, B3 on the backend), tile sweep,
        temporal-head comparison, compiled peak memory at --memory-resolution, acceptance checks.
    python -m evalharness.bench --backend pallas_gpu --resolution 720p --density 0.3887 \
        --heads 10 --head-dim 128 --dtype bfloat16
        the seed's 720p kernel geometry on the Pallas GPU (Triton) kernel, against cuDNN.
    python -m evalharness.bench tiles --resolution 720p --density 0.3887 --block-q 3328 \
        --block-kv 1536 --json
        tile statistics only (no timing), one JSON object.
    python -m evalharness.bench ... --mlflow [--tracking-uri URI] [--experiment NAME]
        also logs each part as an MLflow run (tag bench=kernel_table, tile_sweep,
        temporal_heads, kernel_memory; see evalharness.bench.mlflow_record).

What is not given comes from the run's own configuration (``python -m evalharness``'s defaults,
composed as the run composes them): the geometry is the run's default resolution (``cpu``), the
band's density what the run's default schedule targets at that geometry, the tiles those a run
uses on the backend (``auto_block_sizes``).

Backends and their dense controls: xla (dot_product_attention, the XLA einsum), pallas_tpu
(splash), pallas_gpu (cudnn). The sweep is BQ at fixed BKV on xla and pallas_tpu,
and a BQ x BKV grid on pallas_gpu (tiles the kernel refuses are listed with the reason). A Pallas
backend off its platform exits with status 2 unless --interpret asks for Pallas interpret mode,
which times the interpreter (for checking the benchmark, not for timings); the cuDNN row then
drops out, as cuDNN needs a GPU.

Timings are wall-clock medians of warm runs (compile excluded), rows timed round-robin in one
process (every part: kernel table, sweeps, temporal heads), with min/max and process CPU time
beside them, because the benchmark machine may be shared with other work.

The kernel table's "of ideal" is the speedup over the fastest dense row (B0 at the table's tiles
or the backend's dense control, whichever ran faster) times the mask's kept fraction; above 1.0 it
is flagged "baseline likely slow" in the table and the notes. "executed pairs %" is the share of
the N^2 query-key pairs the kernel computes (visited tiles x tile area, padding included).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax

from evalharness.bench.backends import Backend, dense_control_problem, platform_problem
from evalharness.bench.checks import acceptance_checks
from evalharness.bench.kernel_records import kernel_records
from evalharness.bench.kernel_table import (
    SLOW_BASELINE,
    kernel_table,
    slow_baseline_notes,
    table_variants,
)
from evalharness.bench.memory import compiled_peak_bytes
from evalharness.bench.mlflow_record import (
    add_tracking_args,
    log_records,
    parse_bench_args,
    tracking_requested,
)
from evalharness.bench.report import part_table, record_table
from evalharness.bench.sweep import (
    GPU_SWEEP_BLOCK_KV,
    GPU_SWEEP_BLOCK_Q,
    block_q_sweep,
    plot_sweep,
    plot_tile_sweep,
    tile_sweep,
)
from evalharness.bench.temporal import temporal_comparison
from evalharness.bench.tile_stats import tile_stats
from evalharness.config import compose_run_config, load_resolution, resolution_names, to_config
from evalharness.machine import machine_info
from kernels.executors.dispatch import BACKENDS
from kernels.executors.kernel_inputs import SUPPORTED_DTYPES
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes, tile_limit
from kernels.plans.tiles import VARIANTS, build_plan
from models.dtypes import dtype_of

# The dtypes the kernels take.
_DTYPES = tuple(dtype.name for dtype in SUPPORTED_DTYPES)
PARTS = ("table", "sweep", "temporal", "memory")
# BQ values of the BQ sweep (xla, pallas_tpu) when none are given, those the sequence holds.
_SWEEP_BLOCK_Q = "256,768,1536,2688"


def _run_defaults(args: argparse.Namespace) -> None:
    """Fills what was not given from the run's own configuration (``python -m evalharness``'s
    defaults, composed as the run composes them): its resolution when no geometry is given, and
    the band density its schedule targets at that geometry when no ``--density`` is."""
    if args.density is not None and (args.resolution is not None or args.frames is not None):
        return
    run = to_config(compose_run_config())
    if args.resolution is None and args.frames is None:
        args.resolution = run.resolution.name
    if args.density is None:
        args.density = run.schedule.target_density(_geometry(args))


def _geometry(args: argparse.Namespace) -> TokenGeometry:
    explicit = (args.frames, args.height, args.width)
    if args.resolution is not None:
        if any(x is not None for x in explicit):
            raise ValueError("give either --resolution or --frames/--height/--width, not both")
        return load_resolution(args.resolution).tokens
    if any(x is None for x in explicit):
        raise ValueError("give --resolution or all of --frames, --height, --width (in tokens)")
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
    parser.add_argument(
        "--density",
        type=float,
        help="the band's kept fraction (default: what the run's schedule targets at the geometry)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="xla", help="where b0-b3 run")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="Pallas interpret mode: run a Pallas backend off its platform (times the interpreter)",
    )
    parser.add_argument("--block-q", type=int, help="default: the run's tiles for the backend")
    parser.add_argument("--block-kv", type=int, help="default: the run's tiles for the backend")
    parser.add_argument("--num-warps", type=int, help="pallas_gpu: warps (default per tile)")
    parser.add_argument("--num-stages", type=int, help="pallas_gpu: pipelining stages")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", choices=_DTYPES, default="float32")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--sweep-block-q",
        help=f"comma-separated BQ (default {_SWEEP_BLOCK_Q}; pallas_gpu: "
        f"{','.join(map(str, GPU_SWEEP_BLOCK_Q))})",
    )
    parser.add_argument(
        "--sweep-block-kv",
        help="pallas_gpu only: comma-separated BKV of the tile grid (default "
        f"{','.join(map(str, GPU_SWEEP_BLOCK_KV))})",
    )
    parser.add_argument(
        "--plot",
        help="PNG path for the sweep (default kernel_bq_sweep.png; pallas_gpu: "
        "kernel_tile_sweep.png); an empty string for none",
    )
    parser.add_argument(
        "--memory-resolution", default="480p", choices=presets, help="preset for the memory check"
    )
    parser.add_argument("--skip", default="", help="comma-separated: " + ",".join(PARTS))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    add_tracking_args(parser)
    return parser


def _block_sizes(args: argparse.Namespace, tokens: int) -> BlockSizes:
    """--block-q/--block-kv, each defaulting to the tiles a run uses on the backend
    (``auto_block_sizes``)."""
    default = auto_block_sizes(tokens, args.backend)
    return BlockSizes(
        default.block_q if args.block_q is None else args.block_q,
        default.block_kv if args.block_kv is None else args.block_kv,
    )


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def _skipped(args: argparse.Namespace) -> set[str]:
    """The parts named by --skip (ValueError on a name that is not a part)."""
    skip = set(filter(None, args.skip.split(",")))
    unknown = skip - set(PARTS)
    if unknown:
        raise ValueError(f"--skip {','.join(sorted(unknown))}: the parts are {','.join(PARTS)}")
    return skip


def _check_options(args: argparse.Namespace) -> None:
    """Refuses option mixes before anything is timed (a late refusal would waste the table)."""
    _skipped(args)
    if args.sweep_block_kv and args.backend != "pallas_gpu":
        raise ValueError("--sweep-block-kv is for --backend pallas_gpu (its BQ x BKV grid)")
    for option in ("sweep_block_q", "sweep_block_kv"):
        if getattr(args, option):
            _ints(getattr(args, option))


def _tiles(args: argparse.Namespace) -> int:
    """The ``tiles`` command: tile statistics of one geometry and tile size, no timing."""
    geometry = _geometry(args)
    stats = tile_stats(geometry, args.density, _block_sizes(args, geometry.tokens))
    stats["machine"] = machine_info()
    if args.json:
        print(json.dumps(stats))
    else:
        print(record_table({k: v for k, v in stats.items() if k != "machine"}))
    return 0


def _memory(
    geometry: TokenGeometry,
    density: float,
    block_sizes: BlockSizes,
    args: argparse.Namespace,
    backend: Backend,
    with_dense_control: bool,
) -> list[dict]:
    """Compiled peak memory of b0-b3 on ``backend`` and of its dense control (compile only)."""
    dtype = dtype_of(args.dtype)
    backend.check_tiles(block_sizes, geometry.tokens, args.head_dim, dtype)
    shape = jax.ShapeDtypeStruct((1, geometry.tokens, args.heads, args.head_dim), dtype)
    mask = band_for_density(geometry, density)
    control = (backend.dense_control,) if with_dense_control else ()
    rows = []
    for variant in (*VARIANTS, *control):
        if variant in VARIANTS:
            fn = backend.sparse_fn(build_plan(mask, block_sizes, variant))
        else:
            fn = backend.dense_fn(variant)
        peak = compiled_peak_bytes(fn, shape, shape, shape)
        rows.append({"variant": variant, "tokens": geometry.tokens, "peak_gib": peak / 2**30})
    return rows


def _config(
    args: argparse.Namespace,
    geometry: TokenGeometry,
    block_sizes: BlockSizes,
    backend: Backend,
    control_problem: str | None,
) -> dict:
    """What was benchmarked and where, recorded with the results."""
    return {
        "backend": backend.name,
        "interpret": backend.interpret,
        "frames": geometry.frames,
        "height": geometry.height,
        "width": geometry.width,
        "tokens": geometry.tokens,
        "target_density": args.density,
        "density": band_for_density(geometry, args.density).density,
        "block_q": block_sizes.block_q,
        "block_kv": block_sizes.block_kv,
        # What b0-b3 launched with at these tiles (None off pallas_gpu).
        **backend.launch(block_sizes.block_q, args.head_dim),
        "dense_control": None if control_problem else backend.dense_control,
        "runs": args.runs,
        "heads": args.heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "machine": machine_info(),
    }


def _sweep(
    args: argparse.Namespace,
    geometry: TokenGeometry,
    block_sizes: BlockSizes,
    backend: Backend,
    timed: dict,
) -> dict:
    """The backend's sweep: the BQ x BKV grid on pallas_gpu, else BQ at the run's BKV."""
    result = {}
    if backend.name == "pallas_gpu":
        block_qs = _ints(args.sweep_block_q) if args.sweep_block_q else GPU_SWEEP_BLOCK_Q
        block_kvs = _ints(args.sweep_block_kv) if args.sweep_block_kv else GPU_SWEEP_BLOCK_KV
        rows = tile_sweep(geometry, args.density, block_qs, block_kvs, backend=backend, **timed)
        result["tile_sweep"] = rows
        plot = "kernel_tile_sweep.png" if args.plot is None else args.plot
        if plot and plot_tile_sweep(rows, plot):
            result["tile_sweep_plot"] = plot
        return result
    if args.sweep_block_q:
        block_qs = _ints(args.sweep_block_q)
    else:
        limit = tile_limit(geometry.tokens, backend.name)
        block_qs = tuple(bq for bq in _ints(_SWEEP_BLOCK_Q) if bq <= limit)
    result["bq_sweep"] = block_q_sweep(
        geometry, args.density, block_sizes.block_kv, block_qs, backend=backend, **timed
    )
    plot = "kernel_bq_sweep.png" if args.plot is None else args.plot
    if plot:
        plot_sweep(result["bq_sweep"], plot)
        result["bq_sweep_plot"] = plot
    return result


def _baseline_notes(rows: list[dict]) -> list[str]:
    """Which row the kernel table's fractions of ideal are against, and any row flagged above 1.0
    (``kernel_table.slow_baseline_notes``)."""
    fastest = next((r["fastest_dense"] for r in rows if r.get("fastest_dense")), None)
    if fastest is None:
        return []
    note = (
        f"kernel table: 'of ideal' = speedup over the fastest dense row ({fastest}) x the mask's "
        "kept fraction"
    )
    cpu_fastest = next((r["cpu_fastest_dense"] for r in rows if r.get("cpu_fastest_dense")), None)
    if cpu_fastest is not None:
        note += f"; on CPU medians the fastest dense row is {cpu_fastest}"
    return [note, *slow_baseline_notes(rows)]


def _measure(
    args: argparse.Namespace,
    geometry: TokenGeometry,
    block_sizes: BlockSizes,
    backend: Backend,
    control_problem: str | None,
) -> dict:
    """Runs every part not in ``--skip``; returns the results keyed by part, and "notes"."""
    skip = _skipped(args)
    common = {"heads": args.heads, "head_dim": args.head_dim, "dtype": dtype_of(args.dtype)}
    timed = {**common, "runs": args.runs}
    result: dict = {"notes": []}
    if backend.interpret:
        result["notes"].append(
            "interpret mode: the Pallas kernels ran in the Pallas interpreter, so their times "
            "(and the checks on them) describe the interpreter, not the kernels"
        )
    if control_problem and not {"table", "memory"} <= skip:
        result["notes"].append(control_problem)
    if "table" not in skip:
        print(f"running kernel table ({backend.label}) ...", file=sys.stderr, flush=True)
        variants = table_variants(backend, with_dense_control=control_problem is None)
        result["kernel_table"] = kernel_table(
            geometry, args.density, block_sizes, variants=variants, backend=backend, **timed
        )
        result["notes"] += _baseline_notes(result["kernel_table"])
    if "sweep" not in skip:
        print("running tile sweep ...", file=sys.stderr, flush=True)
        result.update(_sweep(args, geometry, block_sizes, backend, timed))
        flagged = [r for r in result.get("tile_sweep", []) if r.get("ideal_flag")]
        if flagged:
            tiles = ", ".join(f"{r['block_q']}x{r['block_kv']}" for r in flagged)
            result["notes"].append(
                f"tile sweep {tiles}: B2 or B3 above 1.0 of ideal against B0 at the same tiles: "
                f"{SLOW_BASELINE}, not a result"
            )
    if "temporal" not in skip:
        print("running temporal comparison ...", file=sys.stderr, flush=True)
        result["temporal"] = temporal_comparison(
            geometry, args.density, block_sizes, backend=backend, **timed
        )
    if "memory" not in skip:
        if backend.interpret:
            # The interpreter's buffers are not the kernel's: its peak would mislead.
            result["notes"].append(
                "memory part skipped: in interpret mode the compiled peak is the interpreter's"
            )
        else:
            print("compiling for memory analysis ...", file=sys.stderr, flush=True)
            mem_geometry = load_resolution(args.memory_resolution).tokens
            result["memory"] = _memory(
                mem_geometry, args.density, block_sizes, args, backend, control_problem is None
            )
    return result


def format_report(result: dict) -> str:
    """The results as Markdown: config and machine, notes, one table per part, the checks."""
    config = dict(result["config"])
    machine = config.pop("machine")
    label = Backend(config["backend"], config["interpret"]).label
    parts = [f"machine: {machine}", f"config: {config}\n"]
    parts += [f"note: {note}" for note in result.get("notes", [])]
    if result.get("notes"):
        parts[-1] += "\n"
    gpu = config["backend"] == "pallas_gpu"
    headings = {
        "kernel_table": f"## Kernel table ({label})",
        "bq_sweep": f"## BQ sweep at BKV={config['block_kv']} (B2, {label})",
        "tile_sweep": f"## Tile sweep BQ x BKV (B0, B2, B3; {label})",
        "temporal": f"## Temporal heads (B2, exact mask, {label})",
        "memory": f"## Compiled peak memory ({label})",
    }
    for key, heading in headings.items():
        if key in result:
            parts += [heading + "\n", part_table(key, result[key], gpu) + "\n"]
    parts += ["## Checks\n", record_table(result["checks"])]
    return "\n".join(parts)


def _emit(result: dict, args: argparse.Namespace) -> None:
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_report(result))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2: the backend cannot run here as asked)."""
    args = parse_bench_args(_parser(), argv)
    _run_defaults(args)
    if args.command == "tiles":
        return _tiles(args)
    problem = platform_problem(args.backend, args.interpret)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    _check_options(args)
    geometry = _geometry(args)
    backend = Backend(args.backend, args.interpret, args.num_warps, args.num_stages)
    block_sizes = _block_sizes(args, geometry.tokens)
    backend.check_tiles(block_sizes, geometry.tokens, args.head_dim, dtype_of(args.dtype))
    control_problem = dense_control_problem(args.backend, dtype_of(args.dtype), args.head_dim)
    result = {"config": _config(args, geometry, block_sizes, backend, control_problem)}
    result.update(_measure(args, geometry, block_sizes, backend, control_problem))
    result["checks"] = acceptance_checks(
        result.get("kernel_table", []), result.get("memory", []), backend.name
    )
    _emit(result, args)
    if tracking_requested(args):
        plots = {k: result.get(f"{k}_plot") for k in ("bq_sweep", "tile_sweep")}
        log_records(args, kernel_records(result, args.resolution, plots))
    return 0


def _cli() -> int:
    try:
        return main()
    except ValueError as error:  # bad sizes, densities, tiles: say what, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
