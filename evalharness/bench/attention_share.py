"""``python -m evalharness.bench.attention_share``: how much of a transformer forward is self-attention.

Times one forward of the Wan transformer twice at a model and resolution: with the platform's
dense attention (the harness's dense control: b0 on CPU, splash on TPU, cuDNN on GPU, or
``--executor``), and with self-attention replaced by ``q + k + v`` (same shape, so the q/k/v
projections, norms, RoPE, output projection, cross-attention and FFN all still run). Both are
compiled first, then timed in interleaved rounds (``evalharness.arms.timing.time_interleaved``); the
measured share is ``1 - median(without) / median(with)``. Beside it: the analytic FLOP share of
self-attention (``evalharness.estimates.flops.step_flops``) and, at 720p / 1080p / 1440p, the seed's
measured share of a transformer block (Wan 2.1 14B, 81 frames, TPU v6e): 55.5% / 72.5% / 88.2%.

Weights are random (seeded): the share depends on shapes, not on values. A size that would not
fit this device, or take longer than ``--max-minutes``, is refused before anything is allocated.

Usage:
    python -m evalharness.bench.attention_share --model tiny-random --resolution cpu [--runs 5] \
        [--json]
    python -m evalharness.bench.attention_share --model wan2.1-t2v-1.3b --resolution 480p 720p \\
        --dtype bfloat16 --mlflow        # on an accelerator; one MLflow run per resolution
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.arms import time_interleaved
from evalharness.assembly import backend_for, host_platform
from evalharness.bench.mlflow_record import (
    BenchRecord,
    add_tracking_args,
    log_records,
    parse_bench_args,
    tracking_requested,
)
from evalharness.config import load_resolution, resolution_names
from evalharness.estimates import (
    SEED_ATTENTION_SHARE,
    SEED_SETUP,
    count_flops,
    device_memory_bytes,
    measure_matmul_flops,
    parameter_count,
    step_flops,
)
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from kernels.executors.dense_controls import dense_controls
from kernels.executors.dense_memory import dense_executor_temp_bytes
from kernels.policy.attention_policy import make_dense_attend
from kernels.registry import DENSE_EXECUTORS
from models.attention import dense_attention
from models.config import get_transformer_config, transformer_config_names
from models.transformer import WanTransformer
from models.video_geometry import VideoGeometry

# The seed's measured self-attention share of one transformer block (Wan 2.1 14B, 81 frames,
# 8 x TPU v6e, splash attention), seed Table 1.
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# The share of device memory a run may plan to use (the rest: runtime, fragmentation).
MEMORY_HEADROOM = 0.85
# "model": the transformer's own attention (materialised scores); the rest as a run names them.
EXECUTORS = ("model", *DENSE_EXECUTORS)
COLUMNS = (
    ("resolution", "resolution", "{}"),
    ("tokens", "tokens", "{:,.0f}"),
    ("with attention ms", "with_attention_median_ms", "{:.4g}"),
    ("min-max", "with_attention_range_ms", "{}"),
    ("without ms", "without_attention_median_ms", "{:.4g}"),
    ("attention ms", "attention_ms", "{:.4g}"),
    ("measured share", "attention_share", "{:.1%}"),
    ("share per round (min-max)", "share_range", "{}"),
    ("analytic FLOP share", "analytic_flop_share", "{:.1%}"),
    ("seed share", "seed_share", "{:.1%}"),
)


_CUSTOM = re.compile(r"^(\d+)x(\d+)x(\d+)px$")


def video_geometry(resolution: str) -> VideoGeometry:
    """A ``conf/resolution`` preset, or a pixel size written ``<frames>x<height>x<width>px``."""
    match = _CUSTOM.match(resolution)
    if match:
        frames, height, width = (int(g) for g in match.groups())
        return VideoGeometry(frames=frames, height=height, width=width)
    return load_resolution(resolution).video


def _resolution_arg(text: str) -> str:
    """argparse type: a preset name or ``FxHxWpx`` (ArgumentTypeError naming both forms)."""
    try:
        video_geometry(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"{err} (give a preset, one of {', '.join(resolution_names())}, or FxHxWpx)"
        ) from None
    return text


def without_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, step, layer) -> jax.Array:
    """Self-attention replaced by ``q + k + v`` ([B, N, H, D]): O(N) work that keeps the q, k, v
    projections (and everything feeding them) in the compiled graph."""
    del step, layer
    return q + k + v


def _executor(args: argparse.Namespace) -> tuple[str, str]:
    """(executor, backend): ``auto`` is the platform's dense arm (``dense_controls``)."""
    platform = host_platform()
    executor = dense_controls(platform)[0] if args.executor == "auto" else args.executor
    return executor, backend_for("auto", platform)


def _attend(executor: str, backend: str):
    if executor == "model":
        return dense_attention
    return make_dense_attend(executor, backend=backend)


def preflight(args: argparse.Namespace, resolution: str) -> None:
    """Refuses (``SystemExit`` with the numbers and what to change) a size that would not fit
    this device's memory or ``--max-minutes``; allocates nothing.

    Memory is judged on a lower bound, the weights and the attention executor's temporaries
    (both exact for the shapes), so a refusal is never wrong; time on the forwards' FLOPs at this
    device's measured matmul throughput, with half again for compiles and warm-up runs.
    """
    config = get_transformer_config(args.model)
    video = video_geometry(resolution)
    executor, backend = _executor(args)
    item = jnp.dtype(_DTYPES[args.dtype]).itemsize
    if executor != "model":
        attention_temp = dense_executor_temp_bytes(
            executor,
            batch=args.batch,
            heads=config.num_attention_heads,
            tokens=video.tokens,
            head_dim=config.attention_head_dim,
            dtype_bytes=item,
            backend=backend,
        )
    else:  # the model's own dense attention materialises float32 [B, H, N, N] scores
        attention_temp = 2 * 4 * args.batch * config.num_attention_heads * video.tokens**2
    weights = parameter_count(config) * item
    need, device = weights + attention_temp, device_memory_bytes()
    where = f"{args.model} at {resolution} ({video.tokens:,} tokens, batch {args.batch})"
    if need > MEMORY_HEADROOM * device:
        raise SystemExit(
            f"attention_share: {where} needs at least {need / 2**30:.1f} GiB (weights "
            f"{weights / 2**30:.1f}, {executor} attention {attention_temp / 2**30:.1f}) but this "
            f"device has {device / 2**30:.1f} GiB ({MEMORY_HEADROOM:.0%} usable): use a smaller "
            "--resolution or --model, --dtype bfloat16, or a device with more memory"
        )
    flops = count_flops(
        config,
        video,
        steps=1,
        guidance_batch=args.batch,
        warm_runs=args.runs,
        kept_fraction=0.0,  # the second arm: everything but self-attention
        noise_floor=False,
    )
    minutes = 1.5 * flops.total_flops / measure_matmul_flops(args.dtype) / 60.0
    if minutes > args.max_minutes:
        raise SystemExit(
            f"attention_share: {where} would take about {minutes:.1f} minutes here (> "
            f"--max-minutes {args.max_minutes:g}): raise --max-minutes, lower --runs, or run it "
            "on an accelerator"
        )


def _compiled_forwards(args: argparse.Namespace, resolution: str) -> dict[str, Any]:
    """Both forwards, compiled and run once; returns name -> zero-argument call."""
    config = get_transformer_config(args.model)
    video = video_geometry(resolution)
    dtype = _DTYPES[args.dtype]
    executor, backend = _executor(args)
    model = WanTransformer(config, rngs=nnx.Rngs(args.seed), param_dtype=dtype, dtype=dtype)
    graphdef, state = nnx.split(model)
    keys = jax.random.split(jax.random.key(args.seed), 2)
    latents = jax.random.normal(keys[0], (args.batch, *video.latent_shape(config.in_channels)))
    latents = latents.astype(dtype)
    context = jax.random.normal(keys[1], (args.batch, config.text_len, config.text_dim), dtype)
    timestep = jnp.full((args.batch,), 500.0, jnp.float32)
    calls = {}
    for name, attend in (
        ("with_attention", _attend(executor, backend)),
        ("without_attention", without_attention),
    ):

        def forward(state, latents, timestep, context, attend=attend):
            return nnx.merge(graphdef, state)(latents, timestep, context, attend=attend)

        compiled = jax.jit(forward).lower(state, latents, timestep, context).compile()
        jax.block_until_ready(compiled(state, latents, timestep, context))  # warm-up
        calls[name] = lambda c=compiled: c(state, latents, timestep, context)
    return calls


def measure(args: argparse.Namespace, resolution: str) -> dict[str, Any]:
    """One resolution's row: both forwards' timings, the measured, analytic and seed shares."""
    start = time.perf_counter()
    calls = _compiled_forwards(args, resolution)
    compile_s = time.perf_counter() - start
    times = time_interleaved(calls, args.runs)
    with_t, without_t = times["with_attention"], times["without_attention"]
    per_round = [1.0 - b / a for a, b in zip(with_t.runs_s, without_t.runs_s, strict=True)]
    config = get_transformer_config(args.model)
    tokens = video_geometry(resolution).tokens
    attention_flops, total_flops = step_flops(config, tokens, args.batch)
    share = 1.0 - without_t.median_s / with_t.median_s
    row: dict[str, Any] = {"resolution": resolution, "tokens": tokens}
    for name, t in times.items():
        row[f"{name}_median_ms"] = 1e3 * t.median_s
        row[f"{name}_min_ms"], row[f"{name}_max_ms"] = 1e3 * t.min_s, 1e3 * t.max_s
    row.update(
        with_attention_range_ms=f"{1e3 * with_t.min_s:.4g}-{1e3 * with_t.max_s:.4g}",
        attention_ms=1e3 * (with_t.median_s - without_t.median_s),
        attention_share=share,
        attention_share_round_min=min(per_round),
        attention_share_round_max=max(per_round),
        share_range=f"{min(per_round):.1%}-{max(per_round):.1%}",
        analytic_flop_share=attention_flops / total_flops,
        seed_share=SEED_ATTENTION_SHARE.get(resolution),
        compile_and_warm_s=compile_s,
    )
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every ``--resolution`` measured; returns {"config", "rows"}."""
    executor, backend = _executor(args)
    rows = [measure(args, resolution) for resolution in args.resolution]
    config = {
        "model": args.model,
        "weights": f"random (seed {args.seed})",
        "executor": executor,
        "backend": backend,
        "dtype": args.dtype,
        "batch": args.batch,
        "runs": args.runs,
        "without_attention": "q + k + v",
        "seed_setup": SEED_SETUP,
        "machine": machine_info(),
    }
    return {"config": config, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    """Markdown: what was run, then one row per resolution."""
    c = result["config"]
    head = (
        f"Self-attention share of one transformer forward: {c['model']} ({c['weights']}), "
        f"{c['dtype']}, batch {c['batch']}, {c['executor']} attention on {c['backend']} vs "
        f"q + k + v; median of {c['runs']} interleaved warm runs. Seed share: {c['seed_setup']}.\n"
    )
    return head + "\n" + markdown_table(result["rows"], COLUMNS)


def records(result: dict[str, Any]) -> list[BenchRecord]:
    """One MLflow record per resolution (``bench=attention_share``)."""
    c = result["config"]
    out = []
    for row in result["rows"]:
        single = {"config": c, "rows": [row]}
        tags = {"model": c["model"], "resolution": row["resolution"], "backend": c["backend"]}
        config = {**c, "resolution": row["resolution"], "tokens": row["tokens"]}
        out.append(
            BenchRecord("attention_share", config, [row], "resolution", format_table(single), tags)
        )
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.bench.attention_share", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="tiny-random", choices=transformer_config_names())
    parser.add_argument(
        "--resolution",
        nargs="+",
        default=["cpu"],
        type=_resolution_arg,
        help=f"presets ({', '.join(resolution_names())}) or pixel sizes FxHxWpx, e.g. 33x64x64px",
    )
    parser.add_argument("--executor", default="auto", choices=EXECUTORS)
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--batch", type=int, default=1, help="2 = a classifier-free guidance pair")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (>= 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_tracking_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = _parser()
    args = parse_bench_args(parser, argv)
    if args.runs < 3:
        parser.error(f"--runs={args.runs}: use at least 3 for a median")
    for resolution in args.resolution:
        preflight(args, resolution)  # refuse every size before timing any
    result = run(args)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    if tracking_requested(args):
        log_records(args, records(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
