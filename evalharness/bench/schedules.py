"""``python -m evalharness.bench.schedules``: denoising time of every sparsity schedule against dense.

Takes the run's own configuration, composed and resolved as the run does, with any overrides:
``resolution``, ``model`` shapes, ``dtype``, ``steps``, ``sampler``, guidance, ``kernel``
(backend, tiles, dense executor), ``seed`` (inputs, routing), ``model.seed`` (weights) and
``warm_runs`` (timed runs per arm, at least 3). The weights are always random: this benchmark
never loads a checkpoint (``model.checkpoint`` is ignored) and measures time, not quality.

Every schedule of ``conf/schedule`` (a ``schedule.<field>=`` override applies to each) runs
through ``models.pipeline.DenoiseLoop`` with the policy the run's sparse arm builds. Every arm is
compiled first (compile time reported apart), then timed in interleaved rounds (one run of each
per round, so load on a shared machine hits every arm alike; each round's times are printed as
it ends). The speedup is the dense schedule's median over the arm's, measured in the same process.
Then the dense control and each sparse schedule's band kernel are timed alone at the run's
attention shapes (interleaved, same process): an arm's **ideal** is the dense loop with each of its
sparse attention calls' dense control replaced by the band kernel alone (no routing, no layout
change), and ``of ideal`` is that ideal over the arm's measured time.

Usage:
    python -m evalharness.bench.schedules [--json] [OVERRIDE ...]
    python -m evalharness.bench.schedules steps=4 warm_runs=5 kernel.block_q=64 kernel.block_kv=64
    python -m evalharness.bench.schedules model=wan2.1-t2v-1.3b resolution=480p dtype=bfloat16 \
        steps=4   # 1.3B shapes at 480p, random weights, on an accelerator
    python -m evalharness.bench.schedules ... --mlflow [logger.tracking_uri=URI] \
        [logger.experiment_name=NAME]   also logs the table as an MLflow run (tag
        bench=schedules; metrics <schedule>.median_ms, <schedule>.speedup_vs_dense, ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from evalharness.arms import PreparedArm, prepare_arm, time_arms_interleaved
from evalharness.assembly import dense_attend, kernel_options, run_sampler
from evalharness.bench.mlflow_record import BenchRecord, emit
from evalharness.bench.run_config import AttentionCall, bench_parser, config_or_exit
from evalharness.bench.timing import cpu_time_measures_compute, ms_stats, time_warm_ms
from evalharness.config import (
    CONF_DIR,
    EvalConfig,
    compose_run_config,
    group_options,
    load_resolution,
    to_config,
)
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.routing import routing_flops_fraction
from kernels.policy.schedule import SparsitySchedule
from kernels.policy.static_policy import make_policy
from models.dtypes import dtype_of
from models.pipeline import uses_guidance
from models.transformer import WanTransformer

SCHEDULE_DIR = CONF_DIR / "schedule"
COLUMNS = (
    ("schedule", "schedule", "{}"),
    ("kept fraction", "kept_fraction", "{:.4f}"),
    ("dense steps/layers", "dense_steps_layers", "{}"),
    ("median ms (min-max)", "median_range_ms", "{}"),
    ("CPU ms", "cpu_median_ms", "{:.0f}"),
    ("speedup vs dense (wall)", "speedup_vs_dense", "{:.2f}x"),
    ("speedup vs dense (CPU)", "cpu_speedup_vs_dense", "{:.2f}x"),
    ("ideal speedup", "ideal_speedup", "{:.2f}x"),
    ("of ideal", "fraction_of_ideal", "{:.0%}"),
    ("routing FLOPs", "routing_flops_fraction", "{:.2%}"),
    ("compile+warm s", "compile_and_warm_s", "{:.1f}"),
)


def _check_overrides(overrides: Sequence[str]) -> None:
    """Refuses a ``schedule=`` choice: every preset is timed, so one choice would be ignored."""
    for override in overrides:
        if override.split("=", 1)[0].lstrip("+~") == "schedule":
            raise ValueError(
                f"{override!r}: this benchmark times every conf/schedule preset "
                f"({', '.join(group_options('schedule'))}); drop the schedule choice (a "
                "schedule.<field>= override applies to every preset)"
            )


def load_schedules(
    overrides: Sequence[str], geometry: TokenGeometry, tiles: BlockSizes
) -> list[SparsitySchedule]:
    """Every preset of ``conf/schedule`` composed with ``overrides`` and validated against
    ``geometry`` and ``tiles``: the dense one first, then the sparse ones by falling kept pairs.

    Raises:
        ValueError: no dense schedule to compare against, or one that does not suit the
            geometry or tiles (``SparsitySchedule.validate``).
    """
    schedules = [
        to_config(compose_run_config([*overrides, f"schedule={name}"])).schedule
        for name in group_options("schedule")
    ]
    if all(s.sparse for s in schedules):
        raise ValueError(f"{SCHEDULE_DIR} has no dense schedule (sparse: false) to compare with")
    for schedule in schedules:
        schedule.validate(geometry, tiles)
    return sorted(schedules, key=lambda s: (s.sparse, -s.target_density(geometry), s.name))


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every arm shares: the run's call (config, geometry, tiles), model, sampler, inputs."""

    call: AttentionCall
    model: Any
    sampler: Any
    inputs: tuple  # noise, context, negative context (None without guidance)


def _setup(cfg: EvalConfig) -> _Setup:
    """The model with random weights, the run's sampler, and random float32 noise and prompt
    embeddings shaped as the run's (no negative context without guidance)."""
    call = AttentionCall(cfg)
    config = call.model
    keys = jax.random.split(jax.random.key(cfg.seed), 3)
    latent = (1, *call.video.latent_shape(config.in_channels))
    noise = jax.random.normal(keys[0], latent, jnp.float32)
    text = (1, config.text_len, config.text_dim)
    context = jax.random.normal(keys[1], text, jnp.float32)
    negative = None
    if uses_guidance(cfg.guidance_scale, cfg.negative_prompt):
        negative = jax.random.normal(keys[2], text, jnp.float32)
    model = WanTransformer(
        config,
        rngs=nnx.Rngs(cfg.model.seed),
        param_dtype=dtype_of(cfg.model.param_dtype),
        dtype=dtype_of(cfg.dtype),
        scan_layers=cfg.model.scan_layers,
    )
    return _Setup(call, model, run_sampler(cfg), (noise, context, negative))


def _policy(setup: _Setup, schedule: SparsitySchedule) -> AttentionPolicy:
    """The policy the run's sparse arm builds for ``schedule`` at the run's shapes (a static
    mask's ``StaticMaskPolicy`` for ``sta`` and ``radial``)."""
    cfg, geometry, tiles = setup.call.cfg, setup.call.geometry, setup.call.block_sizes
    return make_policy(
        schedule,
        geometry,
        num_steps=cfg.steps,
        num_layers=setup.call.model.num_layers,
        backend=cfg.kernel.backend.value,
        block_sizes=tiles,
        dense_attend=dense_attend(cfg, cfg.kernel.dense_executor),
        seed=cfg.seed,
        options=kernel_options(cfg),
    )


def _schedule_arm(
    setup: _Setup, schedule: SparsitySchedule, policy: AttentionPolicy
) -> tuple[PreparedArm, dict]:
    """One schedule's loop with the policy the run's sparse arm builds for it, compiled and
    warmed up as the run prepares an arm (``prepare_arm``), and its record (timings later)."""
    cfg, geometry, tiles = setup.call.cfg, setup.call.geometry, setup.call.block_sizes
    steps, layers = cfg.steps, setup.call.model.num_layers
    noise, context, negative = setup.inputs
    prepared = prepare_arm(
        schedule.name,
        setup.model,
        setup.sampler,
        guidance_scale=cfg.guidance_scale,
        attend=policy,
        noise=noise,
        context=context,
        negative_context=negative,
        guidance_passes=cfg.guidance_passes.value,
    )
    routing = 0.0
    if schedule.sparse and schedule.routes:  # a static mask routes nothing
        density = schedule.target_density(geometry)
        routing = routing_flops_fraction(geometry, density, schedule.routing_samples)
    arm = {
        "schedule": schedule.name,
        "kept_fraction": schedule.overall_kept_fraction(steps, layers, geometry, tiles),
        "sparse_density": schedule.sparse_density(geometry, tiles) if schedule.sparse else 1.0,
        "dense_steps": policy.dense_steps,
        "dense_layers": policy.dense_layers,
        "routing_flops_fraction": routing,
        "compile_and_warm_s": prepared.compile_s + prepared.warmup_s,
    }
    return prepared, arm


def _kernel_ms(setup: _Setup, policies: dict[str, AttentionPolicy]) -> dict[str, float]:
    """Median ms of one attention call at the run's shapes, interleaved in this process: the
    dense control (``"dense"``) and each sparse schedule's band kernel alone (by name)."""
    call = setup.call
    shape = (call.batch, call.geometry.tokens, call.heads, call.head_dim)
    keys = jax.random.split(jax.random.key(call.cfg.seed), 3)
    q, k, v = (jax.random.normal(key, shape, call.dtype) for key in keys)
    dense = next(p for p in policies.values() if not p.schedule.sparse).dense_attend
    fns = {"dense": functools.partial(jax.jit(lambda q, k, v: dense(q, k, v)), q, k, v)}
    for name, policy in policies.items():
        if policy.schedule.sparse:
            fns[name] = functools.partial(jax.jit(policy.execute_band), q, k, v)
    return {name: t["median_ms"] for name, t in time_warm_ms(fns, call.cfg.warm_runs).items()}


def ideal_ms(dense_loop_ms: float, sparse_calls: int, dense_ms: float, band_ms: float) -> float:
    """A sparse arm's ideal loop time: the dense loop with each sparse attention call's dense
    control replaced by the band kernel alone (no routing, no layout change).

    Args:
        dense_loop_ms: the dense arm's measured loop (median ms).
        sparse_calls: attention calls the arm runs sparse (sparse steps x sparse layers x
            model calls per step).
        dense_ms: one dense control call (median ms).
        band_ms: one band kernel call at the arm's density (median ms).
    """
    return dense_loop_ms - sparse_calls * (dense_ms - band_ms)


def _add_ideals(setup: _Setup, arms: dict[str, dict], kernel_ms: dict[str, float]) -> None:
    """Each sparse arm's ideal time, ideal speedup and fraction of it reached, in place."""
    cfg, layers = setup.call.cfg, setup.call.model.num_layers
    passes = 2 if setup.inputs[2] is not None and setup.call.batch == 1 else 1
    dense_loop = arms["dense"]["median_ms"]
    for name, arm in arms.items():
        if name not in kernel_ms or name == "dense":
            continue
        calls = (cfg.steps - arm["dense_steps"]) * (layers - arm["dense_layers"]) * passes
        ideal = ideal_ms(dense_loop, calls, kernel_ms["dense"], kernel_ms[name])
        arm.update(
            ideal_ms=ideal,
            ideal_speedup=dense_loop / ideal,
            fraction_of_ideal=ideal / arm["median_ms"],
            dense_attention_ms=kernel_ms["dense"],
            band_kernel_ms=kernel_ms[name],
        )


def _describe(cfg: EvalConfig) -> dict:
    """What was run: the settings the table's header and the MLflow params show."""
    call, res = AttentionCall(cfg), cfg.resolution
    g, tiles = call.geometry, call.block_sizes
    return {
        "model": f"{cfg.model.name} (random weights)",
        "resolution": res.name,
        "dtype": cfg.dtype.value,
        "geometry": {
            "frames": g.frames,
            "height": g.height,
            "width": g.width,
            "tokens": g.tokens,
            "pixels": [res.frames, res.height, res.width],
        },
        "steps": cfg.steps,
        "runs": cfg.warm_runs,
        "block_sizes": [tiles.block_q, tiles.block_kv],
        "backend": cfg.kernel.backend.value,
        "dense_executor": cfg.kernel.dense_executor.value,
        "sampler": cfg.sampler.value,
        "guidance": {
            "scale": cfg.guidance_scale,
            "passes": cfg.guidance_passes.value,
            "batch": call.batch,
        },
        "seed": cfg.seed,
    }


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(cfg: EvalConfig, schedules: Sequence[SparsitySchedule]) -> dict:
    """Builds, compiles and times every arm of ``schedules`` (:func:`load_schedules`; the one
    named ``dense`` is the reference) on the resolved ``cfg``, in the run's interleaved timer
    (``time_arms_interleaved``: non-finite latents stop it).

    Returns:
        The machine, the settings (:func:`_describe`), the routing cost at 720p and the arms.
    """
    setup = _setup(cfg)
    policies = {schedule.name: _policy(setup, schedule) for schedule in schedules}
    prepared: dict[str, PreparedArm] = {}
    arms: dict[str, dict] = {}
    for number, schedule in enumerate(schedules, 1):
        # Minutes each at real shapes on an accelerator: say where it is.
        _progress(f"compiling and warming up {schedule.name} ({number}/{len(schedules)}) ...")
        prepared[schedule.name], arms[schedule.name] = _schedule_arm(
            setup, schedule, policies[schedule.name]
        )
        _progress(f"  {arms[schedule.name]['compile_and_warm_s']:.1f} s")
    _progress(f"timing {len(prepared)} arms round-robin, {cfg.warm_runs} rounds ...")
    timed = time_arms_interleaved(prepared, cfg.warm_runs, on_event=_progress)
    for name, times in timed.items():
        arms[name]["wall_ms"] = [1e3 * s for s in times.runs_s]
        arms[name]["cpu_ms"] = [1e3 * s for s in times.cpu_s]
        arms[name].update(ms_stats(times))
    for arm in arms.values():
        arm["speedup_vs_dense"] = arms["dense"]["median_ms"] / arm["median_ms"]
    _progress("timing the dense control and each band kernel alone, interleaved ...")
    _add_ideals(setup, arms, _kernel_ms(setup, policies))
    hd720 = load_resolution("720p").tokens
    return {
        "machine": machine_info(),
        **_describe(cfg),
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
    cpu = cpu_time_measures_compute()
    return [
        {
            **a,
            "dense_steps_layers": f"{a['dense_steps']}/{a['dense_layers']}",
            "median_range_ms": f"{a['median_ms']:.0f} ({a['min_ms']:.0f}-{a['max_ms']:.0f})",
            "cpu_speedup_vs_dense": dense_cpu / a["cpu_median_ms"] if cpu else None,
        }
        for a in arms
    ]


def _guidance_text(guidance: dict) -> str:
    if guidance["batch"] == 2:
        return f"CFG batch 2 (scale {guidance['scale']:g})"
    if guidance["passes"] == "separate" and guidance["scale"] != 1.0:
        return f"CFG in two passes (scale {guidance['scale']:g})"
    return "no CFG"


def format_table(result: dict) -> str:
    """The arms as a markdown table under a line saying what was run."""
    g = result["geometry"]
    frames, height, width = g["pixels"]
    title = (
        f"{result['model']}, resolution {result['resolution']} ({frames} frames x "
        f"{height}x{width} px = {g['frames']} x {g['height']}x{g['width']} tokens, "
        f"{g['tokens']:,}), {result['dtype']}, backend {result['backend']}, tiles "
        f"{result['block_sizes'][0]} x {result['block_sizes'][1]}, dense executor "
        f"{result['dense_executor']}, {result['steps']} steps, "
        f"{_guidance_text(result['guidance'])}, median of {result['runs']} interleaved warm "
        "runs\n\n"
    )
    table = markdown_table(_table_rows(result["arms"]), COLUMNS)
    hd = ", ".join(f"{k} {v:.2%}" for k, v in result["routing_flops_fraction_720p"].items())
    return title + table + f"\n\nrouting FLOPs / sparse attention at 720p: {hd}\n"


def record(result: dict) -> BenchRecord:
    """:func:`run`'s result as an MLflow record (``bench=schedules``), one row per arm."""
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
        tags={"model": model, "resolution": result["resolution"], "backend": result["backend"]},
    )


def configure(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[EvalConfig, list[SparsitySchedule]]:
    """The resolved config and the schedules, or exit 2 through ``parser`` naming the problem
    (a bad override, too few warm runs, with ``--mlflow`` an unusable tracking store)."""
    try:
        _check_overrides(args.overrides)
    except ValueError as error:
        parser.error(str(error))
    cfg = config_or_exit(parser, args.overrides, mlflow=args.mlflow, median=True)
    try:
        call = AttentionCall(cfg)
        schedules = load_schedules(args.overrides, call.geometry, call.block_sizes)
        schedules = only(schedules, args.only)
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        parser.error(str(error))
    return cfg, schedules


def only(schedules: list[SparsitySchedule], names: str | None) -> list[SparsitySchedule]:
    """The dense schedule and the sparse ones ``names`` lists (comma-separated; None: all).

    Raises:
        ValueError: a name that is not a schedule preset (the presets are named).
    """
    if names is None:
        return schedules
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    unknown = wanted - {s.name for s in schedules}
    if unknown:
        known = ", ".join(s.name for s in schedules)
        raise ValueError(f"--only {names}: no schedule {sorted(unknown)}; the presets are {known}")
    return [s for s in schedules if not s.sparse or s.name in wanted]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = bench_parser(
        "evalharness.bench.schedules",
        __doc__,
        "resolution=480p steps=4 (the weights stay random: no checkpoint is ever loaded)",
        mlflow=True,
    )
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help="time the dense arm and only these sparse schedules (comma-separated), e.g. "
        "--only balanced,aggressive at 720p, where all five take longer",
    )
    args = parser.parse_intermixed_args(argv)
    cfg, schedules = configure(parser, args)
    result = run(cfg, schedules)
    emit(args, result, format_table(result), [record(result)], cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
