"""``python -m evalharness.bench``: the kernel benchmark.

Usage:
    python -m evalharness.bench [run] [OVERRIDE ...] [--interpret] [--json] ...
        kernel table (B0, the run's dense controls, B1-B3 on the run's backend), tile sweep,
        temporal-head comparison, compiled peak memory at --memory-resolution, checks.
    python -m evalharness.bench experiment=seed_720p
        the seed's 720p call ([2, 75,600, 5, 128] bf16 at density 0.3887) on this host's kernel:
        Pallas GPU (Triton) against cuDNN on a GPU, Pallas TPU against splash on a TPU.
    python -m evalharness.bench tiles resolution=720p schedule.density=0.3887 \\
        kernel.block_q=3328 kernel.block_kv=1536 --json
        tile statistics only (no timing), one JSON object.
    python -m evalharness.bench ... --mlflow [logger.tracking_uri=URI] [logger.experiment_name=NAME]
        also logs each part as an MLflow run (bench=kernel_table, tile_sweep, temporal_heads,
        kernel_memory).

What is timed is one self-attention call of the run's own configuration, composed and resolved
as the run does (``run_config.AttentionCall``): q, k, v of [samples per model call, tokens,
heads / ``parallel.sequence``, head_dim] in the compute dtype, the band density the ``schedule``
targets, the run's backend, tiles, warps and stages, ``warm_runs`` rounds. The dense rows are b0
and the run's two dense controls (``kernel.dense_executor``, ``kernel.noise_floor_executor``).
The sweep is BQ at fixed BKV on xla and pallas_tpu, a BQ x BKV grid on pallas_gpu (refused tiles
listed with the reason). A Pallas backend off its platform is refused unless --interpret: the
config is then resolved for the kernel's platform and the interpreter is timed (to check the
benchmark, not for timings), without the cuDNN row.

Timings are wall-clock medians of warm runs (compile excluded), rows timed round-robin in one
process, with min/max and process CPU time beside them (the machine may be shared). The kernel
table's "of ideal" is the speedup over the fastest dense row times the mask's kept fraction;
above 1.0 it is flagged "baseline likely slow". "executed pairs %" is the share of the N^2
query-key pairs the kernel computes (visited tiles x tile area, padding included).
"""

from __future__ import annotations

import argparse
import json
import sys

import jax

from evalharness.bench.backends import Backend
from evalharness.bench.checks import acceptance_checks
from evalharness.bench.kernel_records import kernel_records
from evalharness.bench.kernel_table import (
    MASKED_PEERS,
    SLOW_BASELINE,
    kernel_table,
    slow_baseline_notes,
    tile_stats,
)
from evalharness.bench.memory import compiled_peak_bytes
from evalharness.bench.mlflow_record import emit
from evalharness.bench.report import part_table, record_table
from evalharness.bench.run_config import AttentionCall, bench_parser, config_or_exit
from evalharness.bench.sweep import (
    GPU_SWEEP_BLOCK_KV,
    GPU_SWEEP_BLOCK_Q,
    block_q_sweep,
    plot_sweep,
    plot_tile_sweep,
    tile_sweep,
)
from evalharness.bench.temporal import temporal_comparison
from evalharness.config import EvalConfig, load_resolution, resolution_names
from evalharness.machine import machine_info, machine_line
from kernels.executors.dispatch import BACKENDS
from kernels.masks.band import band_for_density
from kernels.plans.block_sizes import tile_limit
from kernels.plans.tiles import VARIANTS, build_plan
from kernels.registry import PLATFORMS

PARTS = ("table", "sweep", "temporal", "memory")
# BQ values of the BQ sweep (xla, pallas_tpu) when none are given, those the sequence holds.
_SWEEP_BLOCK_Q = (256, 768, 1536, 2688)
# Pallas backend -> the platform its kernels compile for (--interpret resolves the run for it).
_PALLAS_PLATFORMS = {
    p.backend: p.name for p in PLATFORMS.values() if p.backend.startswith("pallas")
}


def _ints(text: str) -> tuple[int, ...]:
    """Comma-separated integers (an option's type: a bad one is refused before anything runs)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None


def _parts(text: str) -> frozenset[str]:
    """The parts named by --skip (refused on a name that is not a part)."""
    skip = frozenset(filter(None, text.split(",")))
    if skip - set(PARTS):
        unknown = ",".join(sorted(skip - set(PARTS)))
        raise argparse.ArgumentTypeError(f"{unknown}: the parts are {','.join(PARTS)}")
    return skip


def _parser() -> argparse.ArgumentParser:
    parser = bench_parser(
        "evalharness.bench", __doc__, "experiment=seed_720p (first: run|tiles)", mlflow=True
    )
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="Pallas interpret mode: kernel=pallas_tpu or pallas_gpu off its platform (times the "
        "interpreter)",
    )
    parser.add_argument(
        "--sweep-block-q",
        type=_ints,
        help=f"comma-separated BQ (default {','.join(map(str, _SWEEP_BLOCK_Q))}; pallas_gpu: "
        f"{','.join(map(str, GPU_SWEEP_BLOCK_Q))})",
    )
    parser.add_argument(
        "--sweep-block-kv",
        type=_ints,
        help="pallas_gpu only: comma-separated BKV of the tile grid (default "
        f"{','.join(map(str, GPU_SWEEP_BLOCK_KV))})",
    )
    parser.add_argument(
        "--plot",
        help="PNG path for the sweep (default kernel_bq_sweep.png; pallas_gpu: "
        "kernel_tile_sweep.png); an empty string for none",
    )
    parser.add_argument(
        "--memory-resolution",
        default="480p",
        choices=resolution_names(),
        help="preset for the memory check",
    )
    parser.add_argument(
        "--skip", type=_parts, default=frozenset(), help="comma-separated: " + ",".join(PARTS)
    )
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    return parser


def _run_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace, command: str
) -> EvalConfig:
    """The run's config resolved for this host, or with ``--interpret`` (or for ``tiles``, which
    runs nothing) for its Pallas backend's platform; exits 2 on a setting the run refuses."""
    unresolved = config_or_exit(parser, args.overrides, resolve=False, mlflow=args.mlflow)
    backend = unresolved.kernel.backend.value
    if args.interpret and backend not in _PALLAS_PLATFORMS:
        parser.error(
            f"--interpret runs a Pallas kernel off its platform; kernel={backend} has none: add "
            "kernel=pallas_tpu or kernel=pallas_gpu"
        )
    platform = _PALLAS_PLATFORMS.get(backend) if args.interpret or command == "tiles" else None
    cfg = config_or_exit(parser, args.overrides, platform=platform)
    if cfg.kernel.backend.value not in BACKENDS:
        parser.error(
            f"kernel={cfg.kernel.backend.value} has no tiled kernels; use one of {BACKENDS}"
        )
    if args.sweep_block_kv and cfg.kernel.backend.value != "pallas_gpu":
        parser.error("--sweep-block-kv is for kernel=pallas_gpu (its BQ x BKV grid)")
    return cfg


def _tiles(args: argparse.Namespace, call: AttentionCall) -> int:
    """The ``tiles`` command: the call's tile statistics, no timing."""
    stats = tile_stats(call.geometry, call.target_density, call.block_sizes)
    stats["machine"] = machine_info()
    if args.json:
        print(json.dumps(stats))
    else:
        print(record_table({k: v for k, v in stats.items() if k != "machine"}))
    return 0


def _dense_controls(cfg: EvalConfig) -> tuple[tuple[str, ...], list[str]]:
    """The dense rows beside b0: the run's dense arm and noise floor, less cuDNN off a GPU (only
    interpret mode gets there), with a note saying so."""
    kernel = cfg.kernel
    dense = [e.value for e in (kernel.dense_executor, kernel.noise_floor_executor)]
    dense = [name for name in dense if name != "b0"]
    if "cudnn" not in dense or jax.default_backend() == "gpu":
        return tuple(dense), []
    note = (
        f"cudnn row dropped: cuDNN flash attention needs a GPU and JAX's backend here is "
        f"{jax.default_backend()!r}, so the checks against it are not evaluated"
    )
    return tuple(name for name in dense if name != "cudnn"), [note]


def _memory(
    call: AttentionCall, args: argparse.Namespace, backend: Backend, dense: tuple[str, ...]
) -> list[dict]:
    """Compiled peak memory (compile only) of b0-b3 and the dense controls at
    ``--memory-resolution``, the call's batch, heads, dtype, density and tiles otherwise."""
    geometry = load_resolution(args.memory_resolution).tokens
    backend.check_tiles(call.block_sizes, geometry.tokens, call.head_dim, call.dtype)
    shape = (call.batch, geometry.tokens, call.device_heads, call.head_dim)
    shape = jax.ShapeDtypeStruct(shape, call.dtype)
    mask = band_for_density(geometry, call.target_density)
    rows = []
    for variant in (*VARIANTS, *dense):
        if variant in VARIANTS:
            fn = backend.sparse_fn(build_plan(mask, call.block_sizes, variant))
        else:
            fn = backend.dense_fn(variant)
        peak = compiled_peak_bytes(fn, shape, shape, shape)
        rows.append({"variant": variant, "tokens": geometry.tokens, "peak_gib": peak / 2**30})
    return rows


def _config(call: AttentionCall, backend: Backend, dense: tuple[str, ...]) -> dict:
    """What was benchmarked and where."""
    geometry, block_sizes = call.geometry, call.block_sizes
    return {
        "backend": backend.name,
        "interpret": backend.interpret,
        "model": call.cfg.model.name,
        "resolution": call.label,
        "frames": geometry.frames,
        "height": geometry.height,
        "width": geometry.width,
        "tokens": geometry.tokens,
        "target_density": call.target_density,
        "density": band_for_density(geometry, call.target_density).density,
        "block_q": block_sizes.block_q,
        "block_kv": block_sizes.block_kv,
        # What b0-b3 launched with at these tiles (None off pallas_gpu).
        **backend.launch(block_sizes.block_q, call.head_dim),
        "dense_control": dense[0] if dense else None,
        "runs": call.runs,
        "batch": call.batch,
        "heads": call.device_heads,
        "head_dim": call.head_dim,
        "dtype": call.dtype.name,
        "machine": machine_info(),
    }


def _sweep(args: argparse.Namespace, call: AttentionCall, backend: Backend, timed: dict) -> dict:
    """The backend's sweep: the BQ x BKV grid on pallas_gpu, else BQ at the run's BKV."""
    result = {}
    geometry, density = call.geometry, call.target_density
    if backend.name == "pallas_gpu":
        block_qs = args.sweep_block_q or GPU_SWEEP_BLOCK_Q
        block_kvs = args.sweep_block_kv or GPU_SWEEP_BLOCK_KV
        rows = tile_sweep(geometry, density, block_qs, block_kvs, backend=backend, **timed)
        result["tile_sweep"] = rows
        plot = "kernel_tile_sweep.png" if args.plot is None else args.plot
        if plot and plot_tile_sweep(rows, plot):
            result["tile_sweep_plot"] = plot
        return result
    block_qs = args.sweep_block_q
    if not block_qs:
        limit = tile_limit(geometry.tokens, backend.name)
        block_qs = tuple(bq for bq in _SWEEP_BLOCK_Q if bq <= limit)
    result["bq_sweep"] = block_q_sweep(
        geometry, density, call.block_sizes.block_kv, block_qs, backend=backend, **timed
    )
    plot = "kernel_bq_sweep.png" if args.plot is None else args.plot
    if plot:
        plot_sweep(result["bq_sweep"], plot)
        result["bq_sweep_plot"] = plot
    return result


def _baseline_notes(rows: list[dict]) -> list[str]:
    """Which row the fractions of ideal are against, and any row flagged above 1.0."""
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
    call: AttentionCall,
    backend: Backend,
    dense: tuple[str, ...],
    dropped: list[str],
    result: dict,
) -> None:
    """Runs every part not in ``--skip``, adding each part's rows to ``result`` as it finishes,
    and "notes" (with ``dropped``, why a dense control is not among ``dense``)."""
    skip = args.skip
    timed = {
        "batch": call.batch,
        "heads": call.device_heads,
        "head_dim": call.head_dim,
        "dtype": call.dtype,
        "runs": call.runs,
    }
    geometry, density, block_sizes = call.geometry, call.target_density, call.block_sizes
    if backend.interpret:
        result["notes"].append(
            "interpret mode: the Pallas kernels ran in the Pallas interpreter, so their times "
            "(and the checks on them) describe the interpreter, not the kernels"
        )
    if not {"table", "memory"} <= skip:
        result["notes"] += dropped
    if "table" not in skip:
        print(f"running kernel table ({backend.label}) ...", file=sys.stderr, flush=True)
        # On a TPU also splash given the same mask, the peer b1-b3 must beat.
        peers = MASKED_PEERS if backend.name == "pallas_tpu" else ()
        variants = (VARIANTS[0], *dense, *peers, *VARIANTS[1:])
        result["kernel_table"] = kernel_table(
            geometry, density, block_sizes, variants=variants, backend=backend, **timed
        )
        result["notes"] += _baseline_notes(result["kernel_table"])
    if "sweep" not in skip:
        print("running tile sweep ...", file=sys.stderr, flush=True)
        result.update(_sweep(args, call, backend, timed))
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
            geometry, density, block_sizes, backend=backend, **timed
        )
    if "memory" not in skip:
        if backend.interpret:
            # The interpreter's buffers are not the kernel's: its peak would mislead.
            result["notes"].append(
                "memory part skipped: in interpret mode the compiled peak is the interpreter's"
            )
        else:
            print("compiling for memory analysis ...", file=sys.stderr, flush=True)
            result["memory"] = _memory(call, args, backend, dense)


def format_report(result: dict) -> str:
    """The results as Markdown: config and machine, notes, one table per part, the checks."""
    config = dict(result["config"])
    machine = config.pop("machine")
    label = Backend(config["backend"], config["interpret"]).label
    parts = [machine_line(machine), f"config: {config}\n"]
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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (exits 2 on a setting the run refuses here)."""
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    command = args.overrides.pop(0) if args.overrides[:1] in (["run"], ["tiles"]) else "run"
    call = AttentionCall(_run_config(parser, args, command))
    if command == "tiles":
        return _tiles(args, call)
    kernel = call.cfg.kernel
    backend = Backend(
        kernel.backend.value,
        args.interpret,
        kernel.num_warps,
        kernel.num_stages,
        kernel.vmem_limit_bytes,
    )
    backend.check_tiles(call.block_sizes, call.geometry.tokens, call.head_dim, call.dtype)
    dense, dropped = _dense_controls(call.cfg)
    result = {"config": _config(call, backend, dense), "notes": []}
    try:
        _measure(args, call, backend, dense, dropped, result)
    except BaseException as error:
        _keep_finished_parts(args, result, backend.name, error)
        raise
    _check_and_write(args, result, backend.name)
    plots = {k: result.get(f"{k}_plot") for k in ("bq_sweep", "tile_sweep")}
    emit(args, result, format_report(result), kernel_records(result, call.label, plots), call.cfg)
    return 0


def _check_and_write(args: argparse.Namespace, result: dict, backend: str) -> None:
    """The checks on the parts in ``result``, then the JSON file ``--json-out`` names."""
    result["checks"] = acceptance_checks(
        result.get("kernel_table", []), result.get("memory", []), backend
    )
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1)


def _keep_finished_parts(
    args: argparse.Namespace, result: dict, backend: str, error: BaseException
) -> None:
    """The parts that finished before ``error`` stopped the benchmark (minutes of measurement on
    an accelerator), printed and written as a whole run's are, with a note saying it stopped;
    not logged to MLflow, where a record stands for a whole benchmark."""
    reason = (str(error).splitlines() or [""])[0]
    result["notes"].append(
        f"stopped early by {type(error).__name__}: {reason}; only the parts shown finished"
    )
    _check_and_write(args, result, backend)
    emit(argparse.Namespace(json=args.json, mlflow=False), result, format_report(result))


def _cli() -> int:
    try:
        return main()
    except ValueError as error:  # bad sizes, densities, tiles: say what, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
