"""``python -m evalharness.bench.placement``: where temporal heads are permuted under sequence parallelism.

Times one sparse self-attention call (routing + permutation + head exchange + B3 kernel + exchange
back) on P devices for both placements, "head_local" (permute after the all-to-all, a local gather)
and "before_exchange" (permute while the tokens are still sequence-sharded, which needs the whole
sequence on every device), beside the single-device policy without any exchange. It also prints
the bytes each placement sends between devices, computed (``kernels.parallel.exchange.exchange_bytes``)
for the benchmarked shape and for the real 720p geometry of Wan 14B.

The 720p attention geometry (21 latent frames x 45 x 80 tokens, 40 heads x 128) is scaled to what a
CPU can time: 21 frames x a small grid (default 8 x 16, 2,688 tokens), 8 heads x 64, float32. On a
CPU the P devices are threads of one process (``--xla_force_host_platform_device_count``, set here
before JAX starts), so the "exchange" is a memory copy: the timings rank the placements by the work
they add, not by interconnect speed, which the byte counts cover.

Usage:
    python -m evalharness.bench.placement [--devices 8] [--frames 21 --height 8 --width 16]
        [--heads 8 --head-dim 64] [--density 0.3887] [--runs 5] [--json]
        [--mlflow] [--tracking-uri URI] [--experiment NAME]   (an MLflow run, tag bench=placement)
"""

from __future__ import annotations

import argparse
import os
import sys

# The forced device count must be in XLA_FLAGS before JAX initialises its CPU backend.
if __name__ == "__main__" and "--xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
    _count = next((a.split("=")[1] for a in sys.argv if a.startswith("--devices=")), None)
    if _count is None and "--devices" in sys.argv:
        _count = sys.argv[sys.argv.index("--devices") + 1]
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_count or 8}"
    ).strip()

import json  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from evalharness.bench.mlflow_record import (  # noqa: E402
    BenchRecord,
    add_tracking_args,
    log_records,
    parse_bench_args,
    tracking_requested,
)
from evalharness.bench.report import PLACEMENT_COLUMNS  # noqa: E402
from evalharness.bench.timing import time_interleaved  # noqa: E402
from evalharness.config import load_resolution  # noqa: E402
from evalharness.formatting import markdown_table  # noqa: E402
from evalharness.machine import machine_info  # noqa: E402
from kernels.masks.geometry import TokenGeometry  # noqa: E402
from kernels.parallel.attend import PLACEMENTS, SequenceParallelAttend  # noqa: E402
from kernels.parallel.exchange import exchange_bytes  # noqa: E402
from kernels.parallel.mesh import make_mesh  # noqa: E402
from kernels.plans.block_sizes import BlockSizes  # noqa: E402
from kernels.policy.attention_policy import AttentionPolicy  # noqa: E402
from kernels.policy.schedule import SparsitySchedule  # noqa: E402

# Wan 2.1 14B at 720p, guided batch of 2 in bfloat16: the shape the byte counts are scaled to.
FULL_720P = {
    "batch": 2,
    "tokens": load_resolution("720p").tokens.tokens,
    "heads": 40,
    "head_dim": 128,
    "itemsize": 2,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.bench.placement", description=__doc__
    )
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--frames", type=int, default=21)
    parser.add_argument("--height", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--density", type=float, default=0.3887)
    parser.add_argument("--block", type=int, default=256, help="BQ = BKV of the B3 plan")
    parser.add_argument("--runs", type=int, default=5, help="warm runs (median, min, max)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_tracking_args(parser)
    return parser


def _policy(args: argparse.Namespace) -> AttentionPolicy:
    """Every step and layer sparse: each timed call routes, permutes, exchanges and runs B3."""
    geometry = TokenGeometry(args.frames, args.height, args.width)
    schedule = SparsitySchedule("placement", 0.0, 0.0, args.density, variant="b3")
    return AttentionPolicy(
        schedule,
        geometry,
        num_steps=1,
        num_layers=1,
        block_sizes=BlockSizes(args.block, args.block),
    )


def _traffic(args: argparse.Namespace, policy: AttentionPolicy, placement: str) -> dict:
    """Bytes sent per call at the benchmarked shape (float32) and at 720p 14B."""
    samples = policy.schedule.routing_samples
    sent = exchange_bytes(
        args.batch,
        policy.geometry.tokens,
        args.heads,
        args.head_dim,
        4,
        args.devices,
        placement,
        samples,
    )
    full = exchange_bytes(**FULL_720P, devices=args.devices, placement=placement, samples=samples)
    return {
        "sent_mb": sent["total"] / 1e6,
        "gather_mb": sent["all_gather"] / 1e6,
        "full_720p_gb": full["total"] / 1e9,
    }


def _rows(args: argparse.Namespace, policy: AttentionPolicy) -> list[dict]:
    """Timings of the single-device policy and of each placement on ``args.devices`` devices,
    timed round-robin (``time_interleaved``): one run of each per round, after every one has
    compiled and warmed up."""
    shape = (args.batch, policy.geometry.tokens, args.heads, args.head_dim)
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in keys)
    step = jnp.int32(0)
    single = jax.jit(lambda q, k, v: policy(q, k, v, step=step, layer=0))
    fns = {"1 device (no exchange)": lambda: single(q, k, v)}
    traffic = {}
    mesh = make_mesh(args.devices)
    for placement in PLACEMENTS:
        attend = SequenceParallelAttend(policy, mesh, placement=placement)
        fn = jax.jit(lambda q, k, v, attend=attend: attend(q, k, v, step=step, layer=0))
        sharded = [attend.shard_tokens(x) for x in (q, k, v)]
        name = f"{args.devices} devices, {placement}"
        fns[name] = lambda fn=fn, xs=sharded: fn(*xs)
        traffic[name] = _traffic(args, policy, placement)
    timings = time_interleaved(fns, args.runs)
    return [{"variant": name, **timings[name], **traffic.get(name, {})} for name in fns]


def run(args: argparse.Namespace) -> dict:
    """Times both placements (and the single-device policy) and computes their traffic.

    Returns:
        {"machine", "config", "rows": [one dict per variant]}.
    """
    policy = _policy(args)
    rows = _rows(args, policy)
    geometry = policy.geometry
    return {
        "machine": machine_info(),
        "config": {
            "geometry": f"{geometry.frames} x {geometry.height} x {geometry.width}",
            "tokens": geometry.tokens,
            "batch": args.batch,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "dtype": "float32",
            "density": policy.plan.density,
            "variant": "b3",
            "backend": policy.backend,
            "block": args.block,
            "devices": args.devices,
            "runs": args.runs,
            "full_720p": FULL_720P,
        },
        "rows": rows,
    }


def format_table(result: dict) -> str:
    """Markdown: the side-by-side table plus the configuration and machine."""
    cfg, machine = result["config"], result["machine"]
    full = cfg["full_720p"]
    return "\n".join(
        [
            f"Sparse self-attention call: routing + permutation + exchange + B3 kernel; "
            f"{cfg['geometry']} tokens ({cfg['tokens']:,}), batch {cfg['batch']}, "
            f"{cfg['heads']} heads x {cfg['head_dim']}, {cfg['dtype']}, density "
            f"{cfg['density']:.4f}, tiles {cfg['block']}; median of {cfg['runs']} warm runs, "
            "interleaved (one run of each variant per round).",
            "",
            markdown_table(result["rows"], PLACEMENT_COLUMNS),
            "",
            f"Bytes are all devices together for one call; '720p 14B' is batch {full['batch']}, "
            f"{full['tokens']:,} tokens, {full['heads']} heads x {full['head_dim']}, bfloat16.",
            f"Machine: {machine['processor']}, {machine['cpu_count']} cores, "
            f"{machine['platform']}, JAX {machine['jax_version']} ({machine['jax_backend']}, "
            f"{cfg['devices']} forced host devices).",
        ]
    )


def record(result: dict) -> BenchRecord:
    """The result as an MLflow record (``bench=placement``), one row per variant."""
    return BenchRecord(
        bench="placement",
        config={**result["config"], "machine": result["machine"]},
        rows=result["rows"],
        row_key="variant",
        markdown=format_table(result),
        tags={"backend": str(result["config"]["backend"])},
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse_bench_args(_parser(), argv)
    if args.devices > jax.device_count():
        print(
            f"--devices {args.devices}: only {jax.device_count()} devices; set XLA_FLAGS="
            f"--xla_force_host_platform_device_count={args.devices} before starting Python",
            file=sys.stderr,
        )
        return 2
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    if tracking_requested(args):
        log_records(args, [record(result)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
