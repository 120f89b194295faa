"""One matched dense-vs-sparse comparison, as a plain function the CLI and the tests call.

``run(cfg) -> metrics``: preflight, prompt encoding, one initial noise, the dense arm (cached on disk),
the dense-vs-dense noise floor, the sparse arm, decoding, quality, artifacts, MLflow and the gate.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import DictConfig, OmegaConf

from evalharness import artifacts, preflight
from evalharness.arms import ArmResult, decode_arm, run_arm
from evalharness.attention_setup import build_attention, nominal_kept_fraction, sequence_devices
from evalharness.cache import ArmCache, cache_key, code_version
from evalharness.components import build_components, transformer_config_for
from evalharness.config import EvalConfig, to_config
from evalharness.gate import check_gate
from evalharness.progress import Progress
from evalharness.quality import ffmpeg_psnr, frame_quality
from evalharness.timing import RunTimes
from evalharness.tracking import flatten, make_tracker
from evalharness.video import encode_mp4, side_by_side
from kernels.parallel.mesh import describe_mesh
from models.pipeline import uses_guidance
from models.samplers import default_flow_shift, make_sampler
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)

PHASES = (
    "preflight",
    "build model",
    "encode prompts",
    "dense arm",
    "noise floor",
    "sparse arm",
    "routing statistics",
    "decode",
    "quality",
    "artifacts",
)


class GateFailed(RuntimeError):
    """The run finished but missed a gate threshold; ``metrics`` holds what it measured."""

    def __init__(self, message: str, metrics: dict[str, Any]) -> None:
        super().__init__(message)
        self.metrics = metrics


def make_run_dir(output_root: Path, name: str) -> Path:
    """A fresh run folder; ``mkdtemp`` guarantees two simultaneous runs never share one."""
    runs = output_root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-{name}-", dir=runs))


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def environment_tags() -> dict[str, str]:
    """Where and with what the run happened (MLflow tags)."""
    devices = jax.devices()
    return {
        "git_commit": _git_commit(),
        "jax_version": jax.__version__,
        "device_kind": devices[0].device_kind,
        "device_platform": devices[0].platform,
        "device_count": str(len(devices)),
        "host": socket.gethostname(),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus".strip(),
    }


def _sampler_for(cfg: EvalConfig, geometry: VideoGeometry):
    shift = cfg.resolution.flow_shift or default_flow_shift(geometry.height, geometry.width)
    return make_sampler(cfg.sampler, cfg.steps, shift), shift


def _dense_key(cfg: EvalConfig, identity: str, shift: float) -> str:
    return cache_key(
        {
            "model": identity,
            "param_dtype": cfg.model.param_dtype,
            "dtype": cfg.dtype,
            "resolution": [cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width],
            "steps": cfg.steps,
            "sampler": cfg.sampler,
            "flow_shift": shift,
            "seed": cfg.seed,
            "prompt": cfg.prompt,
            "negative_prompt": cfg.negative_prompt,
            "guidance_scale": cfg.guidance_scale,
            "kernel": dataclasses.asdict(cfg.kernel),
            "parallel": dataclasses.asdict(cfg.parallel),
            "warm_runs": cfg.warm_runs,
            "noise_floor": cfg.noise_floor,
            "code": code_version(),
            "jax": jax.__version__,
            "device": jax.devices()[0].device_kind,
        }
    )


def _arm_meta(arm: ArmResult) -> dict[str, Any]:
    return {
        "times": arm.times.to_json() if arm.times else None,
        "compile_s": arm.compile_s,
        "warmup_s": arm.warmup_s,
        "decode_s": arm.decode_s,
    }


def _arm_from_cache(label: str, arrays: dict, meta: dict) -> ArmResult:
    times = RunTimes.from_json(meta["times"]) if meta.get("times") else None
    return ArmResult(
        label,
        arrays[f"{label}_latents"],
        times,
        meta["compile_s"],
        meta["warmup_s"],
        arrays[f"{label}_frames"],
        meta["decode_s"],
    )


def run(cfg: EvalConfig | DictConfig | dict) -> dict[str, Any]:
    """Runs one comparison and returns its metrics.

    Args:
        cfg: the configuration (Hydra's DictConfig, a dict, or an ``EvalConfig``).

    Returns:
        Flat metrics (also in ``metrics.json`` of the run folder and in MLflow), plus ``run_dir``.

    Raises:
        preflight.PreflightRefusal: the run would exceed ``max_minutes`` or device memory; nothing
            was allocated and no run folder or MLflow run was created.
        GateFailed: the run finished but missed a gate threshold.
        ValueError, FileNotFoundError: bad configuration or checkpoint, before any generation.
    """
    cfg = to_config(cfg)
    if cfg.progress not in ("auto", "on", "off"):
        raise ValueError(f"progress={cfg.progress!r}; use auto, on or off")
    progress = Progress(PHASES, enabled=None if cfg.progress == "auto" else cfg.progress == "on")
    started = time.perf_counter()

    # --- preflight: nothing is allocated before this passes --------------------------------
    progress.phase("preflight")
    geometry = VideoGeometry(cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width)
    tcfg = transformer_config_for(cfg.model)
    sampler, shift = _sampler_for(cfg, geometry)
    cfg_batch = 2 if uses_guidance(cfg.guidance_scale, cfg.negative_prompt) else 1
    estimate = preflight.estimate_cost(
        tcfg,
        geometry,
        steps=cfg.steps,
        cfg_batch=cfg_batch,
        warm_runs=cfg.warm_runs,
        kept_fraction=nominal_kept_fraction(cfg, tcfg.num_layers),
        noise_floor=cfg.noise_floor,
        param_dtype=cfg.model.param_dtype,
        dtype=cfg.dtype,
        devices=sequence_devices(cfg),
    )
    what = f"model={cfg.model.name} resolution={cfg.resolution.name} schedule={cfg.schedule.name}"
    preflight.check(estimate, max_minutes=cfg.max_minutes, what=what)
    attention = build_attention(cfg, geometry, tcfg)
    log.info(
        "preflight: %s tokens, attention %.0f%% of dense FLOPs, estimated %.1f min",
        f"{estimate.tokens:,}",
        100 * estimate.attention_share,
        estimate.estimated_minutes,
    )

    output_root = Path(cfg.output_root)
    run_dir = make_run_dir(
        output_root, f"{cfg.model.name}-{cfg.resolution.name}-{cfg.schedule.name}"
    )
    tracker = make_tracker(
        cfg.logger.kind,
        tracking_uri=cfg.logger.tracking_uri,
        experiment_name=cfg.logger.experiment_name,
        run_name=run_dir.name,
        output_root=output_root,
    )
    resolved = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    try:
        tracker.log_params(flatten(resolved))
        if attention.mesh is not None:
            tracker.log_params(describe_mesh(attention.mesh))
        tracker.set_tags({**environment_tags(), "run_dir": str(run_dir.resolve())})
        tracker.log_metrics(estimate.as_metrics())
        metrics = _compare(cfg, geometry, sampler, shift, attention, run_dir, tracker, progress)
        metrics.update(estimate.as_metrics())
        metrics["total_wall_s"] = time.perf_counter() - started
        gate = check_gate(
            metrics, min_psnr_db=cfg.gate.min_psnr_db, min_speedup=cfg.gate.min_speedup
        )
        metrics["gate_passed"] = gate.passed
        artifacts.write_metrics(run_dir, metrics)
        artifacts.write_report(run_dir, cfg, metrics, gate.failures)
        tracker.log_metrics({k: v for k, v in metrics.items() if isinstance(v, int | float)})
        tracker.set_tags({"gate": "passed" if gate.passed else "failed"})
        tracker.log_artifacts(run_dir)
        tracker.finish("FINISHED")
    except KeyboardInterrupt:
        tracker.set_tags({"error": "interrupted (KeyboardInterrupt)"})
        tracker.finish("KILLED")
        raise
    except BaseException as err:
        tracker.set_tags({"error": f"{type(err).__name__}: {err}"[:5000]})
        tracker.finish("FAILED")
        raise
    finally:
        progress.close()
    metrics["run_dir"] = str(run_dir)
    metrics["mlflow_run_id"] = tracker.run_id
    print(artifacts.summary_lines(metrics), flush=True)
    if not gate.passed:
        raise GateFailed("gate failed: " + "; ".join(gate.failures), metrics)
    return metrics


def _compare(cfg, geometry, sampler, shift, attention, run_dir, tracker, progress) -> dict:
    progress.phase("build model")
    # On a mesh the weights are placed (or, for checkpoints, streamed) onto it here, before any
    # DenoiseLoop captures them.
    components = build_components(cfg.model, cfg.dtype, cfg.cache_dir, attention.mesh)

    progress.phase("encode prompts")
    start = time.perf_counter()
    context = jnp.asarray(components.encode([cfg.prompt]))
    negative = None
    if uses_guidance(cfg.guidance_scale, cfg.negative_prompt):
        negative = jnp.asarray(components.encode([cfg.negative_prompt]))
    text_encode_s = time.perf_counter() - start

    key = jax.random.key(cfg.seed)
    noise = jax.random.normal(key, (1, *geometry.latent_shape()), jnp.float32)
    common = dict(
        guidance_scale=cfg.guidance_scale,
        noise=noise,
        context=context,
        negative_context=negative,
        on_event=progress.event,
        on_step=progress.step_callback(cfg.steps),
    )

    # --- dense arm (cached) and the dense-vs-dense noise floor -------------------------------
    cache = ArmCache(Path(cfg.cache_dir) / "dense_arms")
    dense_key = _dense_key(cfg, components.identity, shift)
    cached = cache.load(dense_key)
    progress.phase("dense arm")
    if cached is not None:
        arrays, meta = cached
        log.info("dense arm: cache hit %s (reused, not recomputed)", dense_key)
        dense = _arm_from_cache("dense", arrays, meta["dense"])
        floor = (
            _arm_from_cache("noise_floor", arrays, meta["noise_floor"])
            if meta.get("noise_floor")
            else None
        )
        progress.phase("noise floor")
    else:
        log.info("dense arm: cache miss %s (computing)", dense_key)
        dense = run_arm(
            "dense",
            components.transformer,
            sampler,
            attend=attention.dense,
            warm_runs=cfg.warm_runs,
            **common,
        )
        decode_arm(dense, components.decode)
        progress.phase("noise floor")
        floor = None
        if cfg.noise_floor:
            floor = run_arm(
                "noise_floor",
                components.transformer,
                sampler,
                attend=attention.noise_floor,
                warm_runs=0,
                **common,
            )
            decode_arm(floor, components.decode)
        arrays = {"dense_latents": dense.latents, "dense_frames": dense.frames}
        meta = {"dense": _arm_meta(dense), "noise_floor": None}
        if floor is not None:
            arrays.update(noise_floor_latents=floor.latents, noise_floor_frames=floor.frames)
            meta["noise_floor"] = _arm_meta(floor)
        cache.store(dense_key, arrays, meta)

    # --- sparse arm ------------------------------------------------------------------------
    progress.phase("sparse arm")
    sparse = run_arm(
        "sparse",
        components.transformer,
        sampler,
        attend=attention.sparse,
        warm_runs=cfg.warm_runs,
        **common,
    )
    progress.phase("routing statistics")
    stats = None
    if attention.recording is not None:
        recorded = run_arm(
            "sparse (recording routing)",
            components.transformer,
            sampler,
            attend=attention.recording,
            warm_runs=0,
            **common,
        )
        del recorded
        stats = attention.collect_stats()
    progress.phase("decode")
    decode_arm(sparse, components.decode)

    # --- quality -----------------------------------------------------------------------------
    progress.phase("quality")
    dense_mp4 = encode_mp4(dense.frames, run_dir / "dense.mp4", fps=cfg.fps, crf=cfg.crf)
    sparse_mp4 = encode_mp4(sparse.frames, run_dir / "sparse.mp4", fps=cfg.fps, crf=cfg.crf)
    ff = ffmpeg_psnr(dense_mp4, sparse_mp4)
    frames_q = frame_quality(dense.frames, sparse.frames)
    metrics: dict[str, Any] = {
        "psnr_ffmpeg_db": ff.average_db,
        "psnr_frames_db": frames_q.mean_psnr_db,
        "psnr_video_db": frames_q.video_psnr_db,
        "ssim_frames": frames_q.mean_ssim,
    }
    if floor is not None:
        floor_mp4 = encode_mp4(floor.frames, run_dir / "noise_floor.mp4", fps=cfg.fps, crf=cfg.crf)
        metrics["noise_floor_psnr_db"] = ffmpeg_psnr(dense_mp4, floor_mp4).average_db
        floor_q = frame_quality(dense.frames, floor.frames)
        metrics["noise_floor_psnr_frames_db"] = floor_q.mean_psnr_db
        metrics["noise_floor_ssim_frames"] = floor_q.mean_ssim
        metrics["noise_floor_max_abs_latent_diff"] = float(
            np.max(np.abs(dense.latents - floor.latents))
        )
    metrics["max_abs_latent_diff"] = float(np.max(np.abs(dense.latents - sparse.latents)))

    # --- timing --------------------------------------------------------------------------------
    for arm in (dense, sparse):
        for name, value in arm.times.summary().items():
            metrics[f"{arm.label}_{name}"] = value
        metrics[f"compile_{arm.label}_s"] = arm.compile_s
        metrics[f"warmup_{arm.label}_s"] = arm.warmup_s
        metrics[f"decode_{arm.label}_s"] = arm.decode_s
    metrics["speedup"] = dense.times.median_s / sparse.times.median_s
    metrics["text_encode_s"] = text_encode_s
    metrics["dense_cache"] = "hit" if cached is not None else "miss"
    metrics["dense_cache_key"] = dense_key
    metrics["tokens"] = geometry.tokens
    metrics["schedule"] = cfg.schedule.name
    metrics.update(attention.describe())

    # --- artifacts ----------------------------------------------------------------------------
    progress.phase("artifacts")
    encode_mp4(
        side_by_side(dense.frames, sparse.frames),
        run_dir / "side_by_side.mp4",
        fps=cfg.fps,
        crf=cfg.crf,
    )
    artifacts.plot_frame_psnr(run_dir / "psnr_per_frame.png", frames_q, ff)
    np.savez(
        run_dir / "quality_per_frame.npz",
        psnr_frames_db=frames_q.psnr_db,
        ssim_frames=frames_q.ssim,
        psnr_ffmpeg_db=ff.per_frame_db,
    )
    for i, value in enumerate(frames_q.psnr_db):
        tracker.log_metrics({"psnr_frame_db": value, "ssim_frame": frames_q.ssim[i]}, step=i)
    if stats is not None:
        attention.save_stats(stats, run_dir)
        per_cell = stats.temporal_fraction()  # [steps, layers], NaN where dense
        for step, row in enumerate(per_cell):
            if not np.isnan(row).all():
                fraction = float(np.nanmean(row))
                tracker.log_metrics({"routing_temporal_fraction": fraction}, step=step)
        metrics["routing_temporal_fraction"] = stats.overall_temporal_fraction()
    (run_dir / "timings.json").write_text(
        json.dumps({"dense": _arm_meta(dense), "sparse": _arm_meta(sparse)}, indent=2)
    )
    return metrics
