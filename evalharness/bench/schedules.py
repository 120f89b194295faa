"""``python -m evalharness.bench.schedules``: denoising time of every sparsity schedule against dense.

Runs a Wan transformer with random weights (the tiny preset by default; ``--model
wan2.1-t2v-1.3b`` builds that checkpoint's shapes, randomly initialised, for timing on an
accelerator without downloading weights) through ``models.pipeline.DenoiseLoop`` with the attention
policy of each ``conf/schedule`` file at the default CPU resolution (17 frames x 256 x 384 pixels: 5
latent frames of 16 x 24 tokens, 1,920 tokens) with classifier-free guidance. Every arm is
compiled first (compile time reported apart); then the timed runs are interleaved across arms, one
run of each per round, so that load from other processes on a shared machine hits every arm alike.
The speedup is the dense schedule's median over the arm's median, measured in the same process.

Usage:
    python -m evalharness.bench.schedules [--steps 8] [--runs 3] [--block 64] [--json]
    python -m evalharness.bench.schedules --model wan2.1-t2v-1.3b --frames 81 --height 480 \
        --width 832 --backend pallas_gpu --dtype bfloat16 --steps 4   # on a GPU
    python -m evalharness.bench.schedules ... --mlflow [--tracking-uri URI] [--experiment NAME]
        also logs the table as an MLflow run (tag bench=schedules; metrics <schedule>.median_ms,
        <schedule>.speedup_vs_dense, ...)

Random weights say nothing about video quality; this benchmark measures time only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import yaml
from flax import nnx

from evalharness.bench.backends import platform_problem
from evalharness.bench.mlflow_record import (
    BenchRecord,
    add_tracking_args,
    log_records,
    parse_bench_args,
    tracking_requested,
)
from evalharness.config import CONF_DIR, load_resolution, token_geometry
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from kernels.executors.dispatch import KernelOptions
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import routing_flops_fraction
from kernels.policy.schedule import SparsitySchedule
from models.config import get_transformer_config, transformer_config_names
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.transformer import WanTransformer
from models.video_geometry import VideoGeometry

SCHEDULE_NAMES = ("dense", "conservative", "balanced", "aggressive")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
PLAIN = "model default (jnp dense)"
# parents: bench, evalharness, then the repository root.
_DEFAULT_SCHEDULE_DIR = CONF_DIR / "schedule"
COLUMNS = (
    ("schedule", "schedule", "{}"),
    ("kept fraction", "kept_fraction", "{:.4f}"),
    ("dense steps/layers", "dense_steps_layers", "{}"),
    ("median ms (min-max)", "median_range_ms", "{}"),
    ("CPU ms", "cpu_median_ms", "{:.0f}"),
    ("speedup vs dense (wall)", "speedup_vs_dense", "{:.2f}x"),
    ("speedup vs dense (CPU)", "cpu_speedup_vs_dense", "{:.2f}x"),
    ("routing FLOPs", "routing_flops_fraction", "{:.2%}"),
    ("compile+warm s", "compile_and_warm_s", "{:.1f}"),
)


def load_schedules(directory: Path, names: tuple[str, ...]) -> list[SparsitySchedule]:
    """Reads ``<directory>/<name>.yaml`` for each name."""
    out = []
    for name in names:
        with open(directory / f"{name}.yaml") as f:
            out.append(SparsitySchedule.from_mapping(yaml.safe_load(f)))
    return out


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every arm shares: the model, sampler and inputs, and the geometry of the video."""

    video: VideoGeometry
    geometry: TokenGeometry
    tiles: BlockSizes
    model: Any
    sampler: Any
    num_layers: int
    inputs: tuple  # latents, context, negative context


def _setup(args: argparse.Namespace) -> _Setup:
    """The tiny model with random weights, the sampler and random inputs at ``args``' size."""
    video = VideoGeometry(frames=args.frames, height=args.height, width=args.width)
    config = get_transformer_config(args.model)
    dtype = _DTYPES[args.dtype]
    keys = jax.random.split(jax.random.key(args.seed), 3)
    latents = jax.random.normal(keys[0], (1, *video.latent_shape(config.in_channels)))
    context = jax.random.normal(keys[1], (1, config.text_len, config.text_dim), dtype)
    negative = jax.random.normal(keys[2], (1, config.text_len, config.text_dim), dtype)
    return _Setup(
        video=video,
        geometry=token_geometry(video),
        tiles=BlockSizes(args.block, args.block),
        model=WanTransformer(config, rngs=nnx.Rngs(0), param_dtype=dtype, dtype=dtype),
        sampler=make_sampler("unipc", args.steps, 3.0),
        num_layers=config.num_layers,
        inputs=(latents, context, negative),
    )


def _compile(setup: _Setup, policy: AttentionPolicy | None):
    """Compiles the denoising loop (the model's own attention when ``policy`` is None) and runs it
    once to warm it; returns the compiled loop and the seconds both took."""
    loop = DenoiseLoop(setup.model, setup.sampler, attend=policy)
    start = time.perf_counter()
    compiled = loop.compile(*setup.inputs)
    jax.block_until_ready(compiled(*setup.inputs).latents)
    return compiled, time.perf_counter() - start


def _schedule_arm(setup: _Setup, schedule: SparsitySchedule, args: argparse.Namespace):
    """One schedule's compiled loop and its record (timings are filled in later)."""
    geometry, tiles = setup.geometry, setup.tiles
    policy = AttentionPolicy(
        schedule,
        geometry,
        num_steps=args.steps,
        num_layers=setup.num_layers,
        backend=args.backend,
        block_sizes=tiles,
        seed=args.seed,
        options=KernelOptions(interpret=args.interpret),
    )
    compiled, seconds = _compile(setup, policy)
    arm = {
        "schedule": schedule.name,
        "kept_fraction": schedule.overall_kept_fraction(
            args.steps, setup.num_layers, geometry, tiles
        ),
        "sparse_density": schedule.sparse_density(geometry, tiles) if schedule.sparse else 1.0,
        "dense_steps": policy.dense_steps,
        "dense_layers": policy.dense_layers,
        "routing_flops_fraction": (
            routing_flops_fraction(
                geometry, schedule.target_density(geometry), schedule.routing_samples
            )
            if schedule.sparse
            else 0.0
        ),
        "compile_and_warm_s": seconds,
    }
    return compiled, arm


def _plain_arm(setup: _Setup, args: argparse.Namespace):
    """The model's own dense_attention (one materialised softmax, no tiles), for context: the
    schedules are compared against the b0 dense executor, the dense arm of the harness."""
    compiled, seconds = _compile(setup, None)
    arm = {
        "schedule": PLAIN,
        "kept_fraction": 1.0,
        "sparse_density": 1.0,
        "dense_steps": args.steps,
        "dense_layers": setup.num_layers,
        "routing_flops_fraction": 0.0,
        "compile_and_warm_s": seconds,
    }
    return compiled, arm


def plain_scores_bytes(model: str, tokens: int) -> int:
    """Bytes the plain arm's softmax holds at once in one layer: float32 scores and their
    exponentials for the CFG batch of 2 x heads x tokens x tokens."""
    heads = get_transformer_config(model).num_attention_heads
    return 2 * (2 * heads * tokens * tokens * 4)


def plain_arm_problem(model: str, tokens: int, device_bytes: int | None) -> str | None:
    """Why the plain arm cannot run on this device (its scores alone exceed the device's memory),
    or None. ``device_bytes`` is None where the device does not report a limit (CPU)."""
    need = plain_scores_bytes(model, tokens)
    if device_bytes is None or need <= device_bytes:
        return None
    return (
        f"the plain arm ({PLAIN}) holds {need / 2**30:.1f} GiB of softmax scores per "
        f"layer at {tokens:,} tokens, more than the device's {device_bytes / 2**30:.1f} GiB; "
        "pass --no-plain to time the schedules without it"
    )


def _device_bytes() -> int | None:
    """The default device's memory limit, or None where it reports none."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def _time_rounds(compiled: dict, arms: dict[str, dict], inputs: tuple, runs: int) -> None:
    """Interleaved rounds, one run of every arm per round; adds timings and speedups to ``arms``."""
    for arm in arms.values():
        arm["wall_ms"], arm["cpu_ms"] = [], []
    for _ in range(runs):
        for name, fn in compiled.items():
            w0, c0 = time.perf_counter(), time.process_time()
            out = fn(*inputs)
            jax.block_until_ready(out.latents)
            arms[name]["wall_ms"].append((time.perf_counter() - w0) * 1e3)
            arms[name]["cpu_ms"].append((time.process_time() - c0) * 1e3)
            if not bool(out.finite):
                raise RuntimeError(f"schedule {name!r} produced non-finite latents")
    dense_median = statistics.median(arms["dense"]["wall_ms"])
    for arm in arms.values():
        arm["median_ms"] = statistics.median(arm["wall_ms"])
        arm["min_ms"], arm["max_ms"] = min(arm["wall_ms"]), max(arm["wall_ms"])
        arm["cpu_median_ms"] = statistics.median(arm["cpu_ms"])
        arm["speedup_vs_dense"] = dense_median / arm["median_ms"]


def run(args: argparse.Namespace) -> dict:
    """Builds, compiles and times every arm; returns the results as a dict."""
    setup = _setup(args)
    schedules = load_schedules(Path(args.schedule_dir), SCHEDULE_NAMES)
    compiled: dict = {}
    arms: dict[str, dict] = {}
    for schedule in schedules:
        compiled[schedule.name], arms[schedule.name] = _schedule_arm(setup, schedule, args)
    if args.plain:
        compiled[PLAIN], arms[PLAIN] = _plain_arm(setup, args)
    _time_rounds(compiled, arms, setup.inputs, args.runs)
    hd720 = load_resolution("720p").tokens
    geometry = setup.geometry
    return {
        "machine": machine_info(),
        "model": f"{args.model} (random weights)",
        "dtype": args.dtype,
        "interpret": args.interpret,
        "geometry": {
            "frames": geometry.frames,
            "height": geometry.height,
            "width": geometry.width,
            "tokens": geometry.tokens,
            "pixels": [args.frames, args.height, args.width],
        },
        "steps": args.steps,
        "runs": args.runs,
        "block_sizes": [setup.tiles.block_q, setup.tiles.block_kv],
        "backend": args.backend,
        "routing_flops_fraction_720p": {
            s.name: routing_flops_fraction(hd720, s.target_density(hd720), s.routing_samples)
            for s in schedules
            if s.sparse
        },
        "arms": list(arms.values()),
    }


def _table_rows(arms: list[dict]) -> list[dict]:
    """Arms with the combined cells of the table."""
    # Process CPU time beside wall time: on a shared machine other processes stretch wall time,
    # while the CPU seconds this process spends are much less disturbed.
    dense_cpu = next(a["cpu_median_ms"] for a in arms if a["schedule"] == "dense")
    return [
        {
            **a,
            "dense_steps_layers": f"{a['dense_steps']}/{a['dense_layers']}",
            "median_range_ms": f"{a['median_ms']:.0f} ({a['min_ms']:.0f}-{a['max_ms']:.0f})",
            "cpu_speedup_vs_dense": dense_cpu / a["cpu_median_ms"],
        }
        for a in arms
    ]


def format_table(result: dict) -> str:
    """The arms as a markdown table."""
    g = result["geometry"]
    title = (
        f"{result['model']}, {result['dtype']}, {g['pixels'][0]} frames x {g['pixels'][1]}x{g['pixels'][2]} px = "
        f"{g['frames']} x {g['height']}x{g['width']} tokens ({g['tokens']}), {result['steps']} "
        f"steps, CFG batch 2, backend {result['backend']}, tiles {result['block_sizes']}, median "
        f"of {result['runs']} interleaved warm runs\n\n"
    )
    if result.get("interpret"):
        title += "Pallas interpret mode: these times are the interpreter's, not the kernel's.\n\n"
    table = markdown_table(_table_rows(result["arms"]), COLUMNS)
    hd = ", ".join(f"{k} {v:.2%}" for k, v in result["routing_flops_fraction_720p"].items())
    return title + table + f"\n\nrouting FLOPs / sparse attention at 720p: {hd}\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.bench.schedules", description=__doc__
    )
    parser.add_argument("--frames", type=int, default=17, help="pixel frames (4k + 1)")
    parser.add_argument("--height", type=int, default=256, help="pixel height (multiple of 16)")
    parser.add_argument("--width", type=int, default=384, help="pixel width (multiple of 16)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per arm (>= 3)")
    parser.add_argument(
        "--block",
        type=int,
        default=64,
        help="tile size (BQ = BKV); at 1,920 tokens the aggressive band is 121 tokens wide",
    )
    parser.add_argument(
        "--backend", default="xla", choices=("xla", "pallas_tpu", "pallas_gpu", "reference")
    )
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="run a Pallas backend in interpret mode off its platform (times the interpreter)",
    )
    parser.add_argument("--model", default="tiny-random", choices=transformer_config_names())
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedule-dir", default=str(_DEFAULT_SCHEDULE_DIR))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-plain",
        dest="plain",
        action="store_false",
        help=f"leave out the context arm {PLAIN!r} (its scores do not fit at large sizes)",
    )
    add_tracking_args(parser)
    return parser


def record(result: dict, resolution: str) -> BenchRecord:
    """The result as an MLflow record (``bench=schedules``), one row per arm.

    Args:
        result: what :func:`run` returns.
        resolution: the preset whose pixel size was run, or ``<frames>x<height>x<width>px``.
    """
    config = {k: v for k, v in result.items() if k != "arms"}
    rows = [
        {k: v for k, v in arm.items() if k not in ("wall_ms", "cpu_ms")}
        for arm in _table_rows(result["arms"])
    ]
    model = result["model"].removesuffix(" (random weights)")
    return BenchRecord(
        bench="schedules",
        config=config,
        rows=rows,
        row_key="schedule",
        markdown=format_table(result),
        tags={"model": model, "resolution": resolution, "backend": result["backend"]},
    )


def resolution_label(frames: int, height: int, width: int) -> str:
    """The ``conf/resolution`` preset of this pixel size, or ``<frames>x<height>x<width>px``."""
    from evalharness.config import resolution_names

    for name in resolution_names():
        preset = load_resolution(name).config
        if (preset.frames, preset.height, preset.width) == (frames, height, width):
            return name
    return f"{frames}x{height}x{width}px"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = _parser()
    args = parse_bench_args(parser, argv)
    if args.runs < 3:
        parser.error(f"--runs={args.runs}: use at least 3 for a median")
    problem = (
        platform_problem(args.backend, args.interpret) if args.backend != "reference" else None
    )
    if not problem and args.plain:
        tokens = VideoGeometry(args.frames, args.height, args.width).tokens
        problem = plain_arm_problem(args.model, tokens, _device_bytes())
    if problem:
        parser.error(problem)
    result = run(args)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(format_table(result))
    if tracking_requested(args):
        label = resolution_label(args.frames, args.height, args.width)
        log_records(args, [record(result, label)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
