"""``python -m evalharness.bench.attention_share``: how much of a transformer forward is self-attention.

Times one forward of the Wan transformer at the run's model and resolution twice, compiled first
and then in interleaved rounds (``warm_runs``): with the run's dense attention
(``evalharness.assembly.dense_attend``, as the run's dense arm) and with self-attention replaced
by ``q + k + v`` (same shape: projections, norms, RoPE, cross-attention and FFN still run). The
measured share is ``1 - median(without) / median(with)``; beside it the analytic FLOP share
(``evalharness.estimates.flops.step_flops``) and, at 720p / 1080p / 1440p, the seed's measured
share of a transformer block (Wan 2.1 14B, 81 frames, TPU v6e): 55.5% / 72.5% / 88.2%.

The configuration is the run's (overrides as positional arguments); weights are random (seeded by
``seed``): the share depends on shapes, not values. A size that would not fit this device, or
take longer than ``max_minutes``, is refused before anything is allocated.

Usage:
    python -m evalharness.bench.attention_share model=tiny-random [--json]
    python -m evalharness.bench.attention_share model=wan2.1-t2v-1.3b resolution=720p \
        dtype=bfloat16 --mlflow        # on an accelerator; one MLflow run per invocation
    python -m evalharness.bench.attention_share resolution.frames=9 resolution.height=64 \
        resolution.width=64           # a size that is not a preset (labelled 9x64x64px)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.arms import time_interleaved
from evalharness.assembly import dense_attend
from evalharness.bench.mlflow_record import BenchRecord, emit
from evalharness.bench.run_config import AttentionCall, bench_parser, config_or_exit
from evalharness.bench.timing import ms_stats
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
from kernels.executors.dense_memory import dense_executor_temp_bytes
from models.transformer import WanTransformer

# The share of device memory a run may plan to use (the rest: runtime, fragmentation).
MEMORY_HEADROOM = 0.85
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


def without_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, step, layer) -> jax.Array:
    """Self-attention replaced by ``q + k + v`` ([B, N, H, D]): O(N) work that keeps the q, k, v
    projections in the compiled graph."""
    del step, layer
    return q + k + v


def preflight(setup: AttentionCall) -> None:
    """Refuses (``SystemExit`` with the numbers and what to change) a size that would not fit
    this device's memory or ``max_minutes``; allocates nothing.

    Memory is judged on a lower bound (the weights and the dense executor's temporaries, exact
    for the shapes), so a refusal is never wrong; time on the forwards' FLOPs at this device's
    measured matmul throughput, with half again for compiles and warm-up runs.
    """
    cfg, config, video = setup.cfg, setup.model, setup.video
    item = setup.dtype.itemsize
    attention_temp = dense_executor_temp_bytes(
        cfg.kernel.dense_executor.value,
        batch=setup.batch,
        heads=config.num_attention_heads,
        tokens=video.tokens,
        head_dim=config.attention_head_dim,
        dtype_bytes=item,
        backend=cfg.kernel.backend.value,
    )
    weights = parameter_count(config) * item
    need, device = weights + attention_temp, device_memory_bytes()
    where = f"{cfg.model.name} at {setup.label} ({video.tokens:,} tokens, batch {setup.batch})"
    if need > MEMORY_HEADROOM * device:
        raise SystemExit(
            f"attention_share: {where} needs at least {need / 2**30:.1f} GiB (weights "
            f"{weights / 2**30:.1f}, {cfg.kernel.dense_executor.value} attention "
            f"{attention_temp / 2**30:.1f}) but this device has {device / 2**30:.1f} GiB "
            f"({MEMORY_HEADROOM:.0%} usable): use a smaller resolution= or model=, "
            "dtype=bfloat16, or a device with more memory"
        )
    flops = count_flops(
        config,
        video,
        steps=1,
        guidance_batch=setup.batch,
        warm_runs=cfg.warm_runs,
        kept_fraction=0.0,  # the second arm: everything but self-attention
        noise_floor=False,
    )
    minutes = 1.5 * flops.total_flops / measure_matmul_flops(cfg.dtype.value) / 60.0
    if minutes > cfg.max_minutes:
        raise SystemExit(
            f"attention_share: {where} would take about {minutes:.1f} minutes here (> "
            f"max_minutes={cfg.max_minutes:g}): raise max_minutes, lower warm_runs, or run it "
            "on an accelerator"
        )


def _compiled_forwards(setup: AttentionCall) -> dict[str, Callable[[], Any]]:
    """Both forwards, compiled and run once; returns name -> zero-argument call."""
    cfg, config, dtype, batch = setup.cfg, setup.model, setup.dtype, setup.batch
    dense = dense_attend(cfg, cfg.kernel.dense_executor)
    model = WanTransformer(config, rngs=nnx.Rngs(cfg.seed), param_dtype=dtype, dtype=dtype)
    graphdef, state = nnx.split(model)
    keys = jax.random.split(jax.random.key(cfg.seed), 2)
    latents = jax.random.normal(keys[0], (batch, *setup.video.latent_shape(config.in_channels)))
    latents = latents.astype(dtype)
    context = jax.random.normal(keys[1], (batch, config.text_len, config.text_dim), dtype)
    timestep = jnp.full((batch,), 500.0, jnp.float32)
    calls = {}
    for name, attend in (("with_attention", dense), ("without_attention", without_attention)):

        def forward(state, latents, timestep, context, attend=attend):
            return nnx.merge(graphdef, state)(latents, timestep, context, attend=attend)

        compiled = jax.jit(forward).lower(state, latents, timestep, context).compile()
        jax.block_until_ready(compiled(state, latents, timestep, context))  # warm-up
        calls[name] = lambda c=compiled: c(state, latents, timestep, context)
    return calls


def measure(setup: AttentionCall) -> dict[str, Any]:
    """The row: both forwards' timings, the measured, analytic and seed shares."""
    start = time.perf_counter()
    calls = _compiled_forwards(setup)
    compile_s = time.perf_counter() - start
    times = time_interleaved(calls, setup.cfg.warm_runs)
    with_t, without_t = times["with_attention"], times["without_attention"]
    per_round = [1.0 - b / a for a, b in zip(with_t.runs_s, without_t.runs_s, strict=True)]
    tokens = setup.video.tokens
    attention_flops, total_flops = step_flops(setup.model, tokens, setup.batch)
    row: dict[str, Any] = {"resolution": setup.label, "tokens": tokens}
    stats = {name: ms_stats(t) for name, t in times.items()}
    for name, s in stats.items():
        row.update({f"{name}_{k}": s[k] for k in ("median_ms", "min_ms", "max_ms")})
    with_ms = stats["with_attention"]
    row.update(
        with_attention_range_ms=f"{with_ms['min_ms']:.4g}-{with_ms['max_ms']:.4g}",
        attention_ms=with_ms["median_ms"] - stats["without_attention"]["median_ms"],
        attention_share=1.0 - without_t.median_s / with_t.median_s,
        attention_share_round_min=min(per_round),
        attention_share_round_max=max(per_round),
        share_range=f"{min(per_round):.1%}-{max(per_round):.1%}",
        analytic_flop_share=attention_flops / total_flops,
        seed_share=SEED_ATTENTION_SHARE.get(setup.label),
        compile_and_warm_s=compile_s,
    )
    return row


def run(setup: AttentionCall) -> dict[str, Any]:
    """The measurement; returns {"config", "rows"} (one row)."""
    cfg = setup.cfg
    config = {
        "model": cfg.model.name,
        "weights": f"random (seed {cfg.seed})",
        "executor": cfg.kernel.dense_executor.value,
        "backend": cfg.kernel.backend.value,
        "dtype": cfg.dtype.value,
        "batch": setup.batch,
        "runs": cfg.warm_runs,
        "without_attention": "q + k + v",
        "seed_setup": SEED_SETUP,
        "machine": machine_info(),
    }
    return {"config": config, "rows": [measure(setup)]}


def format_table(result: dict[str, Any]) -> str:
    """Markdown: what was run, then the row."""
    c = result["config"]
    head = (
        f"Self-attention share of one transformer forward: {c['model']} ({c['weights']}), "
        f"{c['dtype']}, batch {c['batch']}, {c['executor']} attention on {c['backend']} vs "
        f"q + k + v; median of {c['runs']} interleaved warm runs. Seed share: {c['seed_setup']}.\n"
    )
    return head + "\n" + markdown_table(result["rows"], COLUMNS)


def record(result: dict[str, Any]) -> BenchRecord:
    """:func:`run`'s result as an MLflow record (``bench=attention_share``)."""
    c, (row,) = result["config"], result["rows"]
    tags = {"model": c["model"], "resolution": row["resolution"], "backend": c["backend"]}
    config = {**c, "resolution": row["resolution"], "tokens": row["tokens"]}
    return BenchRecord("attention_share", config, [row], "resolution", format_table(result), tags)


def _parser() -> argparse.ArgumentParser:
    return bench_parser(
        "evalharness.bench.attention_share", __doc__, "resolution=720p", mlflow=True
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    cfg = config_or_exit(parser, args.overrides, mlflow=args.mlflow, median=True)
    setup = AttentionCall(cfg)
    preflight(setup)
    result = run(setup)
    emit(args, result, format_table(result), [record(result)], setup.cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
