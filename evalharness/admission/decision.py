"""Admission of a run: every check that must pass before a weight is read or a folder created.

The run's sizing on this host (``sizing``: memory, time, the Pallas kernels' budgets), judged by
``preflight``; the attention functions, for checkpoint models each arm's attention compiled ahead
of time (``compile_check``); then every part of the checkpoint checked (a hub checkpoint's files
downloaded, ``evalharness.assembly.checkpoint_source``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import jax

from evalharness.admission import compile_check, preflight
from evalharness.admission.advice import checked_advice
from evalharness.admission.run_timing import arm_executors, samples_per_call, samples_per_step
from evalharness.admission.sizing import RunSizing, quadratic_arms, size_run
from evalharness.assembly import (
    AttentionSetup,
    build_attention,
    fetch_checkpoint,
    nominal_kept_fraction,
    platform_choices,
    run_sampler,
    sequence_devices,
    transformer_config_for,
)
from evalharness.config import EvalConfig, config_pairs
from evalharness.estimates import (
    FlopCount,
    attention_shape,
    count_flops,
    host_target,
    measure_matmul_flops,
)
from evalharness.exit_codes import stop_if_signalled
from models.config import TINY_PRESETS, WanTransformerConfig
from models.dtypes import dtype_of
from models.samplers import Sampler
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    """What an admitted run starts from.

    Attributes:
        geometry: the video's pixel and latent sizes.
        tcfg: the transformer architecture.
        sampler: the sampler every arm shares.
        shift: the sampler's flow shift.
        attention: the dense, noise-floor and sparse attention functions.
        flops: the comparison's FLOP count.
        sizing: the per-device memory table, time estimate and kernel budgets on this host.
    """

    geometry: VideoGeometry
    tcfg: WanTransformerConfig
    sampler: Sampler
    shift: float
    attention: AttentionSetup
    flops: FlopCount
    sizing: RunSizing


def require_host_device() -> None:
    """Refuses a JAX without a CPU device beside the accelerator: the run's host callbacks
    (routing statistics, per-step progress) need one, and would fail after the first compile.

    Raises:
        ValueError: naming the setting and its fix.
    """
    try:
        jax.devices("cpu")
    except RuntimeError as err:
        platforms = os.environ.get("JAX_PLATFORMS", "")
        raise ValueError(
            f"JAX_PLATFORMS={platforms!r} leaves out the CPU, where the run's host callbacks "
            "(routing statistics, per-step progress) run; set "
            f"JAX_PLATFORMS={platforms + ',' if platforms else ''}cpu, or unset it"
        ) from err


def admit(cfg: EvalConfig) -> Admission:
    """Estimates the cost, refuses what does not fit, and builds the attention functions.

    Args:
        cfg: the run's config, resolved for this host (``platform_choices.resolve``).

    Returns:
        What the comparison starts from.

    Raises:
        ValueError: JAX has no CPU device for the run's host callbacks.
        preflight.PreflightRefusal: time, memory, SMEM/VMEM, GPU shared memory or (checkpoints)
            an arm's compile; nothing was allocated and no weight read.
    """
    require_host_device()
    geometry = cfg.resolution.video
    tcfg = transformer_config_for(cfg.model)
    sampler = run_sampler(cfg)
    flops = count_flops(
        tcfg,
        geometry,
        steps=cfg.steps,
        guidance_batch=samples_per_step(cfg),
        warm_runs=cfg.warm_runs,
        kept_fraction=nominal_kept_fraction(cfg, geometry, tcfg.num_layers),
        noise_floor=cfg.noise_floor,
        # Refuses a bad prompt file or seed list here, before anything is allocated.
        pairs=len(config_pairs(cfg)),
    )
    what = f"model={cfg.model.name} resolution={cfg.resolution.name} schedule={cfg.schedule.name}"
    flops_per_s = measure_matmul_flops(cfg.dtype.value)
    stop_if_signalled()  # safe points between admission's steps: nothing has started yet
    sizing = _size_run(cfg, tcfg, flops_per_s)
    stop_if_signalled()
    advice = []
    if not sizing.memory.fits:  # each setting it suggests is applied and planned again
        advice = checked_advice(
            cfg, sizing, lambda c: _size_run(platform_choices.resolve(c), tcfg, flops_per_s)
        )
    # The whole run's time (loops, decodes, host work) and its memory, judged once.
    preflight.check(
        flops,
        sizing.memory,
        sizing.estimate,
        max_minutes=cfg.max_minutes,
        what=what,
        advice=advice,
    )
    if sizing.problems:
        budgets = sizing.budget_markdown()
        raise preflight.PreflightRefusal(
            f"preflight refused {what}: " + "; ".join(sizing.problems) + f"\n\n{budgets}\n"
            "Nothing was allocated."
        )
    attention = build_attention(cfg, geometry, tcfg)
    stop_if_signalled()
    # A Wan checkpoint is slow to read: its attention compiles first. Random weights are drawn
    # in seconds, so the run's own compile of each arm is the check (a refusal is exit 2 too).
    if cfg.model.name not in TINY_PRESETS and not cfg.model.random_weights:
        _compile_ahead(cfg, tcfg, attention)
    if not cfg.model.seeded:
        # Every part checked, a hub checkpoint's files downloaded: still before any folder.
        fetch_checkpoint(cfg.model)
    _log_plan(flops, sizing)
    return Admission(geometry, tcfg, sampler, sampler.shift, attention, flops, sizing)


def _log_plan(flops: FlopCount, sizing: RunSizing) -> None:
    """The preflight's line (the whole run's minutes, as ``time_plan.md``) and memory plan."""
    memory = sizing.memory
    log.info(
        "preflight: %s tokens, attention %.0f%% of dense FLOPs, estimated %s, peak %.2f GiB "
        "of %.2f GiB per device",
        f"{flops.tokens:,}",
        100 * flops.attention_share,
        sizing.estimate.summary(),
        memory.peak_bytes / 2**30,
        memory.device_bytes / 2**30,
    )
    # Indented so the run log's only top-level Markdown table stays a sweep's summary table.
    table = "\n".join(f"    {line}" for line in memory.to_markdown().splitlines())
    log.info("per-device memory plan (GiB):\n%s", table)


def _size_run(cfg: EvalConfig, tcfg: WanTransformerConfig, flops_per_s: float) -> RunSizing:
    """The per-device memory table, time estimate (at the measured matmul throughput
    ``flops_per_s``) and Pallas budgets of this run on this host."""
    target = host_target(flops_per_s, dtype=cfg.dtype.value)
    return size_run(
        cfg,
        tcfg,
        target,
        devices=sequence_devices(cfg),
        lower=False,
        compile_arms=quadratic_arms(cfg),
    )


def _compile_ahead(cfg: EvalConfig, tcfg: WanTransformerConfig, attention: AttentionSetup) -> None:
    """Compiles every arm's attention at the run's shapes before any weight is read."""
    kernel = cfg.kernel
    where = f"on {kernel.backend.value}, tiles {kernel.block_q}x{kernel.block_kv}"
    executors = {arm: f"{name} {where}" for arm, name in arm_executors(cfg).items()}
    executors["sparse"] = f"schedule {cfg.schedule.name} ({cfg.schedule.variant}) {where}"
    arms = {
        "dense": attention.dense,
        "noise_floor": attention.noise_floor,
        "sparse": attention.sparse,
    }
    compute = dtype_of(cfg.dtype)
    tokens = attention.geometry.tokens
    call = attention_shape(
        tcfg, batch=samples_per_call(cfg), tokens=tokens, devices=1, dtype_bytes=compute.itemsize
    )
    layer = compile_check.first_sparse_layer(attention.schedule, attention.layers)
    compile_check.check_attention_paths(arms, call.abstract(compute), layer, executors)
