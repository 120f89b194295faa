"""Memory prediction benchmark: ``estimate_memory`` against the compiler and against a real run.

Usage:
    python -m evalharness.bench.memory [--shapes cpu tiny-8640 mid-4320] [--json] \
        [--mlflow [logger.tracking_uri=URI] [logger.experiment_name=NAME] [output_root=DIR]]

For each CPU shape and arm (dense b0, noise-floor dot_product_attention, sparse policy with a
dense first step) it prints the denoise-phase peak of:

- plan, given: ``evalharness.estimates.estimate_memory`` with each executor's temporaries given
  as bytes (XLA's plan of the executor alone) plus the computed routing and layout buffers: the
  dry-run path, for executors that do not compile on the planning host;
- plan, compiled: the same plan with the attention compiled into the transformer (the path of a
  run on its own device);
- whole loop: XLA's plan (arguments + outputs + temporaries) of the arm's whole denoising loop,
  on abstract weights;
- measured: a fresh subprocess builds the model, compiles the loop, returns freed heap to the OS
  (``malloc_trim``), resets the peak-RSS counter (``/proc/self/clear_refs``), runs the loop once
  and reports the peak RSS growth plus the bytes of the weights and inputs it held. Large
  allocations go straight to ``mmap`` (``MALLOC_MMAP_THRESHOLD_``) so RSS follows live buffers.
  XLA:CPU's dot runtime also packs operands outside XLA's plan (about one more [B, H, N, N]
  buffer for the einsum attention): that is in the measurement and in no plan.

Each shape takes one to two minutes on a 2-core CPU. ``--mlflow`` logs the table as an MLflow run
(``bench=memory_prediction``); the shapes are the benchmark's own, so of the run's overrides only
``logger.*`` and ``output_root`` are taken.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp

from evalharness.bench.mlflow_record import BenchRecord, emit
from evalharness.bench.run_config import bench_parser, config_or_exit
from evalharness.config import token_geometry
from evalharness.estimates import (
    CPU_RUNTIME_OVERHEAD,
    GIB,
    ExecutorSpec,
    compiled_temp_bytes,
    estimate_memory,
)
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from kernels.policy.attention_policy import AttentionPolicy, make_dense_attend
from kernels.policy.schedule import SparsitySchedule
from models.config import WanTransformerConfig, get_transformer_config
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler
from models.transformer import abstract_transformer
from models.video_geometry import VideoGeometry

ARMS = ("dense", "noise_floor", "sparse")
_MID = dict(num_attention_heads=8, attention_head_dim=64, ffn_dim=2048, num_layers=2, text_dim=64)


@dataclass(frozen=True)
class BenchShape:
    """One benchmark case: a model, a video and the loop's length."""

    name: str
    model: dict  # WanTransformerConfig fields; {} is the tiny preset
    frames: int
    height: int
    width: int
    steps: int = 2

    @property
    def config(self) -> WanTransformerConfig:
        return WanTransformerConfig(**self.model, text_len=128) if self.model else TINY

    @property
    def geometry(self) -> VideoGeometry:
        return VideoGeometry(self.frames, self.height, self.width)


TINY = get_transformer_config("tiny-planted")
SHAPES = {
    "cpu": BenchShape("cpu", {}, 33, 192, 320),  # the default job: 2,160 tokens
    "tiny-8640": BenchShape("tiny-8640", {}, 33, 384, 640),
    "mid-4320": BenchShape("mid-4320", _MID, 33, 256, 480),
}
# One dense step then one sparse step, so the sparse loop holds both sides of its lax.cond.
_SCHEDULE = SparsitySchedule("bench", first_times_fp=0.5, density=0.35, routing_samples=64)


def compiled_peak_bytes(fn: Callable, *shapes: jax.ShapeDtypeStruct) -> int:
    """:func:`lowered_peak_bytes` of ``jax.jit(fn)`` lowered for the abstract ``shapes``."""
    return lowered_peak_bytes(jax.jit(fn).lower(*shapes))


def lowered_peak_bytes(lowered: jax.stages.Lowered) -> int:
    """Arguments + outputs + temporaries - aliased bytes of ``lowered`` once compiled: what XLA
    plans to hold at once (an upper bound on live buffers, excluding the runtime)."""
    analysis = lowered.compile().memory_analysis()
    return int(
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
    )


def _attends(shape: BenchShape) -> dict[str, Callable]:
    """The three arms' attention functions, as the harness builds them on CPU (xla backend)."""
    dense = make_dense_attend("b0")
    policy = AttentionPolicy(
        _SCHEDULE,
        token_geometry(shape.geometry),
        num_steps=shape.steps,
        num_layers=shape.config.num_layers,
        dense_attend=dense,
    )
    return {
        "dense": dense,
        "noise_floor": make_dense_attend("dot_product_attention"),
        "sparse": policy,
    }


def _executor_specs(
    shape: BenchShape, attends: dict[str, Callable], compile_attention: bool
) -> dict[str, ExecutorSpec]:
    """Each arm's executor: temporaries from XLA's plan of the executor alone, and (when
    ``compile_attention``) the attention itself, to be compiled into the blocks."""
    cfg = shape.config
    qkv = jax.ShapeDtypeStruct(
        (2, shape.geometry.tokens, cfg.num_attention_heads, cfg.attention_head_dim), jnp.float32
    )
    dense = compiled_temp_bytes(attends["dense"], qkv, qkv, qkv)
    policy = attends["sparse"]
    floor = compiled_temp_bytes(attends["noise_floor"], qkv, qkv, qkv)
    specs = {
        "dense": ExecutorSpec("b0", dense),
        "noise_floor": ExecutorSpec("dot_product_attention", floor),
        "sparse": ExecutorSpec(
            policy.plan.variant,
            compiled_temp_bytes(policy.execute_band, qkv, qkv, qkv),
            routed=True,
            routing_samples=_SCHEDULE.routing_samples,
            dense_name="b0",
            dense_temp_bytes=dense,
            fuses_layout=True,
        ),
    }
    if not compile_attention:
        return specs
    return {arm: dataclasses.replace(s, attend=attends[arm]) for arm, s in specs.items()}


def _loop_inputs(shape: BenchShape) -> tuple[jax.ShapeDtypeStruct, ...]:
    cfg, s = shape.config, jax.ShapeDtypeStruct
    latents = s((1, *shape.geometry.latent_shape()), jnp.float32)
    context = s((1, cfg.text_len, cfg.text_dim), jnp.float32)
    return latents, context, context


def _loop(model, shape: BenchShape, attend: Callable) -> DenoiseLoop:
    sampler = make_sampler("unipc", shape.steps, 3.0)
    return DenoiseLoop(model, sampler, guidance_scale=5.0, attend=attend)


def _plan(shape: BenchShape, attends: dict[str, Callable], compile_attention: bool):
    return estimate_memory(
        shape.config,
        shape.geometry,
        batch=2,
        devices=1,
        param_dtype="float32",
        dtype="float32",
        executors=_executor_specs(shape, attends, compile_attention),
        text_encoder_bytes=0,
        vae_bytes=0,
        device_bytes=2**40,
        runtime_overhead=CPU_RUNTIME_OVERHEAD,
    )


def predict(shape: BenchShape) -> list[dict]:
    """The two plans' ("given", "compiled", see the module) and the whole loop's compiled
    bytes per arm; nothing is allocated."""
    attends = _attends(shape)
    given = _plan(shape, attends, compile_attention=False)
    compiled = _plan(shape, attends, compile_attention=True)
    model = abstract_transformer(shape.config)
    return [
        {
            "shape": shape.name,
            "tokens": shape.geometry.tokens,
            "arm": arm,
            "given": given.phase_bytes(arm)["denoise"],
            "compiled_plan": compiled.phase_bytes(arm)["denoise"],
            "compiled_loop": lowered_peak_bytes(
                _loop(model, shape, attends[arm]).lower(*_loop_inputs(shape))
            ),
            "dominant": given.dominant(arm),
        }
        for arm in ARMS
    ]


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak_rss() -> int:
    """Frees what can be freed, resets the peak-RSS counter, and returns the RSS now."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    return _status_bytes("VmRSS")


def measure(shape: BenchShape, arm: str) -> dict:
    """Runs one arm's loop once (in this process) and returns its measured peak bytes."""
    from flax import nnx

    from models.transformer import WanTransformer

    cfg = shape.config
    model = nnx.jit(lambda: WanTransformer(cfg, rngs=nnx.Rngs(0)))()
    latents, context, _ = _loop_inputs(shape)
    noise = jax.random.normal(jax.random.key(0), latents.shape, jnp.float32)
    ctx = jax.random.normal(jax.random.key(1), context.shape, jnp.float32)
    neg = jax.random.normal(jax.random.key(2), context.shape, jnp.float32)
    compiled = _loop(model, shape, _attends(shape)[arm]).compile(noise, ctx, neg)
    weights = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model)))
    held = weights + noise.nbytes + ctx.nbytes + neg.nbytes
    base = _reset_peak_rss()
    jax.block_until_ready(compiled(noise, ctx, neg).latents)
    grown = _status_bytes("VmHWM") - base
    return {"measured": held + grown, "run_growth": grown, "held": held}


def _measure_in_subprocess(shape: BenchShape, arm: str) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    spec = json.dumps({"shape": asdict(shape), "arm": arm})
    cmd = [sys.executable, "-m", "evalharness.bench.memory", "--measure", spec]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


COLUMNS = (
    ("shape", "shape", "{}"),
    ("tokens", "tokens", "{:,.0f}"),
    ("arm", "arm", "{}"),
    ("plan, given GiB", "given_gib", "{:.3f}"),
    ("plan, compiled GiB", "compiled_plan_gib", "{:.3f}"),
    ("whole loop GiB", "compiled_loop_gib", "{:.3f}"),
    ("measured GiB", "measured_gib", "{:.3f}"),
    ("given / measured", "given_ratio", "{:.2f}"),
    ("compiled / measured", "compiled_ratio", "{:.2f}"),
    ("compiled / whole loop", "compiled_vs_loop", "{:.2f}"),
    ("largest part", "dominant", "{}"),
)


def benchmark(names: list[str]) -> list[dict]:
    """Plans, the whole loop's plan and the measured peak for every shape and arm."""
    rows = []
    for name in names:
        for row in predict(SHAPES[name]):
            row.update(_measure_in_subprocess(SHAPES[name], row["arm"]))
            for key in ("given", "compiled_plan", "compiled_loop", "measured"):
                row[f"{key}_gib"] = row[key] / GIB
            row["given_ratio"] = row["given"] / row["measured"]
            row["compiled_ratio"] = row["compiled_plan"] / row["measured"]
            row["compiled_vs_loop"] = row["compiled_plan"] / row["compiled_loop"]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(
        "evalharness.bench.memory", __doc__, "logger.experiment_name=bench", mlflow=True
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the subprocess's entry point
    args = parser.parse_intermixed_args(argv)
    if args.measure:
        spec = json.loads(args.measure)
        print(json.dumps(measure(BenchShape(**spec["shape"]), spec["arm"])))
        return
    logging_only = ("logger", "output_root")
    other = [o for o in args.overrides if not o.lstrip("+~").startswith(logging_only)]
    if other:
        parser.error(
            f"{' '.join(other)}: the shapes are the benchmark's own (--shapes); of the run's "
            "overrides it takes logger.* and output_root (where --mlflow logs)"
        )
    cfg = config_or_exit(parser, args.overrides, resolve=False, mlflow=args.mlflow)
    rows = benchmark(args.shapes)
    emit(args, rows, markdown_table(rows, COLUMNS), [record(rows, args.shapes)], cfg)


def record(rows: list[dict], shapes: list[str]) -> BenchRecord:
    """The rows as an MLflow record (``bench=memory_prediction``), metrics ``<shape>/<arm>.<col>``."""
    named = [{"case": f"{r['shape']}/{r['arm']}", **r} for r in rows]
    config = {"shapes": shapes, "machine": machine_info()}
    table = markdown_table(rows, COLUMNS)
    return BenchRecord("memory_prediction", config, named, "case", table, {"backend": "xla"})


if __name__ == "__main__":
    main()
