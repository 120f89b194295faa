"""``python -m evalharness.bench.placement``: where temporal heads are permuted under sequence parallelism.

Times one sparse self-attention call (routing + permutation + head exchange + sparse kernel +
exchange back) on P devices for both placements, "head_local" (permute after the all-to-all, a
local gather) and "before_exchange" (permute while the tokens are still sequence-sharded, which
needs the whole sequence on every device), beside the single-device policy, with the bytes each
sends (``kernels.parallel.exchange.exchange_bytes``) at the benchmarked shape and at Wan 14B 720p.

The call is the run's (``run_config.AttentionCall``: tokens, heads, head_dim, batch of one model
call, dtype, tiles, ``warm_runs``), with the band density the ``schedule`` targets, every step
and layer sparse so each call routes; P is ``parallel.sequence`` and must divide the heads. Its
0 (every local device) means one device on a CPU, so there the benchmark exposes
``BENCH_HOST_DEVICES`` (4) host devices, or N for ``parallel.sequence=N``, unless XLA_FLAGS sets
``--xla_force_host_platform_device_count``. Those devices are threads of one process: the
timings rank the placements by the work they add, not by interconnect speed (the bytes do that).

Usage:
    python -m evalharness.bench.placement [--json] [OVERRIDE ...]
    python -m evalharness.bench.placement parallel.sequence=2 warm_runs=5
    python -m evalharness.bench.placement resolution=720p model=wan2.1-t2v-14b parallel.sequence=8
    ... --mlflow [logger.tracking_uri=URI] [logger.experiment_name=NAME]   (an MLflow run, tag
        bench=placement)
"""

from __future__ import annotations

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp

from evalharness.assembly import kernel_options, platform_choices
from evalharness.bench.mlflow_record import BenchRecord, emit
from evalharness.bench.report import PLACEMENT_COLUMNS
from evalharness.bench.run_config import AttentionCall, bench_parser, config_or_exit
from evalharness.bench.timing import time_warm_ms
from evalharness.config import EvalConfig, load_resolution
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info, machine_line
from kernels.parallel.attend import PLACEMENTS, SequenceParallelAttend
from kernels.parallel.exchange import exchange_bytes
from kernels.parallel.mesh import make_mesh
from kernels.policy.attention_policy import AttentionPolicy
from models.config import get_transformer_config

# Host devices a CPU exposes when ``parallel.sequence`` is 0 (every local device): 4 divides the
# heads of every model preset (tiny 4, Wan 1.3B 12, Wan 14B 40).
BENCH_HOST_DEVICES = 4
_FORCE_FLAG = "--xla_force_host_platform_device_count"

# Wan 2.1 14B at 720p, guided batch of 2 in bfloat16: the shape the byte counts are scaled to.
_WAN_14B = get_transformer_config("wan2.1-t2v-14b")
FULL_720P = {
    "batch": 2,
    "tokens": load_resolution("720p").tokens.tokens,
    "heads": _WAN_14B.num_attention_heads,
    "head_dim": _WAN_14B.attention_head_dim,
    "itemsize": 2,
}


def expose_host_devices(cfg: EvalConfig) -> int | None:
    """Makes a CPU backend hold ``parallel.sequence`` devices (``BENCH_HOST_DEVICES`` for 0).

    Returns:
        The host device count set, or None when XLA_FLAGS already forces one or JAX's backends
        have started (an in-process caller): their devices then stand.
    """
    if _FORCE_FLAG in os.environ.get("XLA_FLAGS", ""):
        return None
    count = cfg.parallel.sequence or BENCH_HOST_DEVICES
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        return None
    return count


def settings(cfg: EvalConfig) -> AttentionCall:
    """The call from the run's unresolved config (resolving starts JAX, which must wait for
    ``expose_host_devices``).

    Raises:
        ValueError: a dense schedule, or heads or tokens that do not split over the devices
            (the message names the setting to change).
    """
    if not cfg.schedule.sparse:
        raise ValueError(f"schedule={cfg.schedule.name} is dense; pick a sparse schedule")
    cfg = platform_choices.resolve(cfg)
    s = AttentionCall(cfg)
    _ = s.device_heads  # refuses heads that do not divide by P, naming the P that do
    tokens = s.geometry.tokens
    if tokens % s.devices:
        raise ValueError(
            f"resolution={cfg.resolution.name} has {tokens} tokens, which do not split over "
            f"{s.parallel_setting}; set parallel.sequence to a divisor of {tokens}"
        )
    return s


def _policy(s: AttentionCall) -> AttentionPolicy:
    """The run's schedule with every step and layer sparse, so each timed call routes,
    permutes, exchanges and runs the sparse kernel, on the run's backend and tiles."""
    schedule = dataclasses.replace(s.cfg.schedule, first_times_fp=0.0, first_layers_fp=0.0)
    return AttentionPolicy(
        schedule,
        s.geometry,
        num_steps=1,
        num_layers=1,
        backend=s.cfg.kernel.backend.value,
        block_sizes=s.block_sizes,
        seed=s.cfg.seed,
        options=kernel_options(s.cfg),
    )


def _traffic(s: AttentionCall, policy: AttentionPolicy, placement: str) -> dict:
    """Bytes sent per call at the benchmarked shape and at 720p 14B."""
    samples = policy.schedule.routing_samples
    shape = (s.batch, s.geometry.tokens, s.heads, s.head_dim, s.dtype.itemsize)
    sent = exchange_bytes(*shape, s.devices, placement, samples)
    full = exchange_bytes(**FULL_720P, devices=s.devices, placement=placement, samples=samples)
    return {
        "sent_mb": sent["total"] / 1e6,
        "gather_mb": sent["all_gather"] / 1e6,
        "full_720p_gb": full["total"] / 1e9,
    }


def _rows(s: AttentionCall, policy: AttentionPolicy) -> list[dict]:
    """Timings of the single-device policy and of each placement on ``s.devices`` devices,
    round-robin after every one has compiled and warmed up (``time_warm_ms``)."""
    shape = (s.batch, s.geometry.tokens, s.heads, s.head_dim)
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, shape, s.dtype) for key in keys)
    step = jnp.int32(0)
    single = jax.jit(lambda q, k, v: policy(q, k, v, step=step, layer=0))
    fns = {"1 device (no exchange)": lambda: single(q, k, v)}
    traffic = {}
    mesh = make_mesh(s.devices)
    for placement in PLACEMENTS:
        attend = SequenceParallelAttend(policy, mesh, placement=placement)
        fn = jax.jit(lambda q, k, v, attend=attend: attend(q, k, v, step=step, layer=0))
        sharded = [attend.shard_tokens(x) for x in (q, k, v)]
        name = f"{s.devices} devices, {placement}"
        fns[name] = lambda fn=fn, xs=sharded: fn(*xs)
        traffic[name] = _traffic(s, policy, placement)
    timings = time_warm_ms(fns, s.runs)
    return [{"variant": name, **timings[name], **traffic.get(name, {})} for name in fns]


def run(s: AttentionCall, host_devices: int | None = None) -> dict:
    """Times both placements and the single-device policy, with their traffic;
    ``host_devices`` (what ``expose_host_devices`` set) is recorded.

    Returns:
        {"machine", "config", "rows": [one dict per variant]}.
    """
    policy = _policy(s)
    rows = _rows(s, policy)
    geometry, cfg = s.geometry, s.cfg
    return {
        "machine": machine_info(),
        "config": {
            "model": cfg.model.name,
            "resolution": cfg.resolution.name,
            "schedule": cfg.schedule.name,
            "geometry": f"{geometry.frames} x {geometry.height} x {geometry.width}",
            "tokens": geometry.tokens,
            "batch": s.batch,
            "heads": s.heads,
            "head_dim": s.head_dim,
            "dtype": s.dtype.name,
            "target_density": s.target_density,
            "density": policy.plan.density,
            "variant": str(policy.plan.variant),
            "backend": policy.backend,
            "block_q": s.block_sizes.block_q,
            "block_kv": s.block_sizes.block_kv,
            "devices": s.devices,
            "parallel_sequence": cfg.parallel.sequence,
            "host_devices": host_devices,
            "runs": s.runs,
            "full_720p": FULL_720P,
        },
        "rows": rows,
    }


def _devices_line(cfg: dict) -> str:
    """Where P came from: the setting, and the host devices the benchmark exposed."""
    line = f"Devices: {cfg['devices']}, parallel.sequence={cfg['parallel_sequence']}"
    if cfg["parallel_sequence"] == 0:
        line += " (every local device)"
    if cfg["host_devices"] is not None:
        line += f"; this benchmark exposed {cfg['host_devices']} host devices"
        if cfg["parallel_sequence"] == 0:
            line += ", its default for parallel.sequence=0 on a CPU (BENCH_HOST_DEVICES)"
    return line + "."


def format_table(result: dict) -> str:
    """Markdown: the side-by-side table plus the configuration and machine."""
    cfg = result["config"]
    full = cfg["full_720p"]
    return "\n".join(
        [
            f"Sparse self-attention call: routing + permutation + exchange + {cfg['variant']} "
            f"kernel; model {cfg['model']}, resolution {cfg['resolution']}: {cfg['geometry']} "
            f"tokens ({cfg['tokens']:,}), batch {cfg['batch']} (samples per model call), "
            f"{cfg['heads']} heads x {cfg['head_dim']}, {cfg['dtype']}, schedule "
            f"{cfg['schedule']} at density "
            f"{cfg['density']:.4f} (every step and layer sparse), tiles {cfg['block_q']} x "
            f"{cfg['block_kv']} ({cfg['backend']}); median of {cfg['runs']} warm runs, "
            "interleaved (one run of each variant per round).",
            _devices_line(cfg),
            "",
            markdown_table(result["rows"], PLACEMENT_COLUMNS),
            "",
            f"Bytes are all devices together for one call; '720p 14B' is batch {full['batch']}, "
            f"{full['tokens']:,} tokens, {full['heads']} heads x {full['head_dim']}, bfloat16.",
            machine_line(result["machine"]),
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
    """Entry point; returns the exit code (2 for settings the benchmark cannot run)."""
    parser = bench_parser(
        "evalharness.bench.placement", __doc__, "parallel.sequence=2", mlflow=True
    )
    args = parser.parse_intermixed_args(argv)
    cfg = config_or_exit(parser, args.overrides, resolve=False, mlflow=args.mlflow)
    host_devices = expose_host_devices(cfg)
    try:
        s = settings(cfg)
    except ValueError as refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    if s.devices > jax.device_count():
        print(
            f"error: parallel.sequence={s.devices} but only {jax.device_count()} devices; on a "
            f"CPU set XLA_FLAGS={_FORCE_FLAG}={s.devices} before starting Python",
            file=sys.stderr,
        )
        return 2
    result = run(s, host_devices)
    emit(args, result, format_table(result), [record(result)], cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
