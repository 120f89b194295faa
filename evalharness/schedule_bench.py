"""``python -m evalharness.schedule_bench``: denoising time of every sparsity schedule against dense.

Runs the tiny Wan transformer (random weights) through ``models.pipeline.DenoiseLoop`` with the
attention policy of each ``conf/schedule`` file at the default CPU resolution (17 frames x 256 x 384
pixels: 5 latent frames of 16 x 24 tokens, 1,920 tokens) with classifier-free guidance. Every arm is
compiled first (compile time reported apart); then the timed runs are interleaved across arms, one
run of each per round, so that load from other processes on a shared machine hits every arm alike.
The speedup is the dense schedule's median over the arm's median, measured in the same process.

Usage:
    python -m evalharness.schedule_bench [--steps 8] [--runs 3] [--block 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import yaml

from kernels.bench.machine import machine_info
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import make_policy
from kernels.policy.routing import routing_flops_fraction
from kernels.policy.schedule import SparsitySchedule

SCHEDULE_NAMES = ("dense", "conservative", "balanced", "aggressive")
PLAIN = "model default (jnp dense)"
_DEFAULT_SCHEDULE_DIR = Path(__file__).resolve().parents[2] / "conf" / "schedule"
# Wan's VAE: 4x in time (first frame apart), 8x in space; the transformer patch is 2 x 2.
_TIME_STRIDE, _SPACE_STRIDE, _PATCH = 4, 8, 2


def load_schedules(directory: Path, names: tuple[str, ...]) -> list[SparsitySchedule]:
    """Reads ``<directory>/<name>.yaml`` for each name."""
    out = []
    for name in names:
        with open(directory / f"{name}.yaml") as f:
            out.append(SparsitySchedule.from_mapping(yaml.safe_load(f)))
    return out


def _latent_shape(frames: int, height: int, width: int) -> tuple[int, int, int]:
    if (frames - 1) % _TIME_STRIDE or height % 16 or width % 16:
        raise ValueError(
            f"frames={frames}, height={height}, width={width}: need frames = 4k + 1 and height, "
            "width multiples of 16 (e.g. 17 x 256 x 384)"
        )
    return (frames - 1) // _TIME_STRIDE + 1, height // _SPACE_STRIDE, width // _SPACE_STRIDE


def run(args: argparse.Namespace) -> dict:
    """Builds, compiles and times every arm; returns the results as a dict."""
    from flax import nnx

    from models.config import get_transformer_config
    from models.pipeline import DenoiseLoop
    from models.samplers import make_sampler
    from models.transformer import WanTransformer

    f_lat, h_lat, w_lat = _latent_shape(args.frames, args.height, args.width)
    geometry = TokenGeometry(f_lat, h_lat // _PATCH, w_lat // _PATCH)
    tiles = BlockSizes(args.block, args.block)
    config = get_transformer_config("tiny")
    model = WanTransformer(config, rngs=nnx.Rngs(0))
    sampler = make_sampler("unipc", args.steps, 3.0)
    keys = jax.random.split(jax.random.key(args.seed), 3)
    latents = jax.random.normal(keys[0], (1, config.in_channels, f_lat, h_lat, w_lat))
    context = jax.random.normal(keys[1], (1, config.text_len, config.text_dim))
    negative = jax.random.normal(keys[2], (1, config.text_len, config.text_dim))

    schedules = load_schedules(Path(args.schedule_dir), SCHEDULE_NAMES)
    arms: dict[str, dict] = {}
    compiled = {}
    for schedule in schedules:
        policy = make_policy(
            schedule,
            geometry,
            num_steps=args.steps,
            num_layers=config.num_layers,
            backend=args.backend,
            block_sizes=tiles,
            seed=args.seed,
        )
        loop = DenoiseLoop(model, sampler, attend=policy)
        start = time.perf_counter()
        compiled[schedule.name] = loop.compile(latents, context, negative)
        jax.block_until_ready(compiled[schedule.name](latents, context, negative).latents)  # warm
        arms[schedule.name] = {
            "schedule": schedule.name,
            "kept_fraction": schedule.overall_kept_fraction(
                args.steps, config.num_layers, geometry, tiles
            ),
            "sparse_density": schedule.sparse_density(geometry, tiles) if schedule.sparse else 1.0,
            "dense_steps": policy.dense_steps,
            "dense_layers": policy.dense_layers,
            "routing_flops_fraction": (
                routing_flops_fraction(geometry, schedule.density, schedule.routing_samples)
                if schedule.sparse
                else 0.0
            ),
            "compile_and_warm_s": time.perf_counter() - start,
            "wall_ms": [],
            "cpu_ms": [],
        }

    # The model's own dense_attention (one materialised softmax, no tiles) for context: the
    # schedules are compared against the b0 dense executor, the dense arm of the harness.
    loop = DenoiseLoop(model, sampler)
    start = time.perf_counter()
    plain = loop.compile(latents, context, negative)
    jax.block_until_ready(plain(latents, context, negative).latents)
    arms[PLAIN] = {
        "schedule": PLAIN,
        "kept_fraction": 1.0,
        "sparse_density": 1.0,
        "dense_steps": args.steps,
        "dense_layers": config.num_layers,
        "routing_flops_fraction": 0.0,
        "compile_and_warm_s": time.perf_counter() - start,
        "wall_ms": [],
        "cpu_ms": [],
    }
    compiled[PLAIN] = plain
    for _ in range(args.runs):  # interleaved rounds: one run of every arm per round
        for name, fn in compiled.items():
            w0, c0 = time.perf_counter(), time.process_time()
            out = fn(latents, context, negative)
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
    hd720 = TokenGeometry.from_resolution("720p")
    return {
        "machine": machine_info(),
        "model": "tiny (random weights)",
        "geometry": {
            "frames": geometry.frames,
            "height": geometry.height,
            "width": geometry.width,
            "tokens": geometry.tokens,
            "pixels": [args.frames, args.height, args.width],
        },
        "steps": args.steps,
        "runs": args.runs,
        "block_sizes": [tiles.block_q, tiles.block_kv],
        "backend": args.backend,
        "routing_flops_fraction_720p": {
            s.name: routing_flops_fraction(hd720, s.density, s.routing_samples)
            for s in schedules
            if s.sparse
        },
        "arms": list(arms.values()),
    }


def format_table(result: dict) -> str:
    """The arms as a markdown table."""
    head = (
        "| schedule | kept fraction | dense steps/layers | median ms (min-max) | CPU ms | "
        "speedup vs dense (wall) | speedup vs dense (CPU) | routing FLOPs | compile+warm s |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    # Process CPU time beside wall time: on a shared machine other processes stretch wall time,
    # while the CPU seconds this process spends are much less disturbed.
    dense_cpu = next(a["cpu_median_ms"] for a in result["arms"] if a["schedule"] == "dense")
    rows = [
        f"| {a['schedule']} | {a['kept_fraction']:.4f} | {a['dense_steps']}/{a['dense_layers']} | "
        f"{a['median_ms']:.0f} ({a['min_ms']:.0f}-{a['max_ms']:.0f}) | {a['cpu_median_ms']:.0f} | "
        f"{a['speedup_vs_dense']:.2f}x | {dense_cpu / a['cpu_median_ms']:.2f}x | "
        f"{a['routing_flops_fraction']:.2%} | "
        f"{a['compile_and_warm_s']:.1f} |"
        for a in result["arms"]
    ]
    g = result["geometry"]
    title = (
        f"tiny model, {g['pixels'][0]} frames x {g['pixels'][1]}x{g['pixels'][2]} px = "
        f"{g['frames']} x {g['height']}x{g['width']} tokens ({g['tokens']}), {result['steps']} "
        f"steps, CFG batch 2, backend {result['backend']}, tiles {result['block_sizes']}, median "
        f"of {result['runs']} interleaved warm runs\n\n"
    )
    hd = ", ".join(f"{k} {v:.2%}" for k, v in result["routing_flops_fraction_720p"].items())
    return title + head + "\n".join(rows) + f"\n\nrouting FLOPs / sparse attention at 720p: {hd}\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.schedule_bench", description=__doc__
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
    parser.add_argument("--backend", default="xla", choices=("xla", "pallas_tpu", "reference"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedule-dir", default=str(_DEFAULT_SCHEDULE_DIR))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs={args.runs}: use at least 3 for a median")
    result = run(args)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
