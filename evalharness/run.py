"""One matched dense-vs-sparse comparison, as a plain function the CLI and the tests call.

``run(cfg) -> metrics``: preflight, prompt encoding, one initial noise, the dense arm (cached on disk),
the dense-vs-dense noise floor, the sparse arm, decoding, quality, artifacts, MLflow and the gate.
:func:`run` is the orchestration; :func:`_compare` is the comparison itself, a sequence of named
steps over one :class:`Comparison`.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from omegaconf import DictConfig, OmegaConf

from evalharness import artifacts, kernel_choice, preflight
from evalharness.admission import admit
from evalharness.arms import (
    ArmResult,
    PreparedArm,
    check_same_latents,
    decode_arm,
    prepare_arm,
    time_arms_interleaved,
)
from evalharness.attention_setup import (
    AttentionSetup,
)
from evalharness.cache import (
    ArmCache,
    DenseArms,
    load_dense_arms,
    store_dense_arms,
)
from evalharness.cache_key import dense_arm_key
from evalharness.components import Components, build_components
from evalharness.config import EvalConfig, to_config, to_plain_dict
from evalharness.gate import GateResult, check_gate
from evalharness.progress import Progress
from evalharness.quality import VideoQuality, measure, quality_metrics
from evalharness.run_plan import RunPlan
from evalharness.timing import fastest_control, timed_window_tags, timing_metrics
from evalharness.tracking import (
    Tracker,
    environment_tags,
    flatten,
    log_frame_curves,
    log_routing_curve,
    make_tracker,
)
from kernels.parallel.mesh import describe_mesh
from kernels.policy.routing_stats import RoutingStats
from models.pipeline import uses_guidance
from models.samplers import Sampler
from models.video_geometry import VideoGeometry

log = logging.getLogger(__name__)

PHASES = (
    "preflight",
    "build model",
    "encode prompts",
    "compile arms",
    "timing (interleaved)",
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


@dataclass
class Comparison:
    """Everything one comparison reads and fills in, step by step.

    Attributes:
        cfg: the validated configuration.
        geometry: the video's pixel and latent sizes.
        sampler: the sampler every arm shares.
        shift: the sampler's flow shift.
        attention: the dense, noise-floor and sparse attention functions.
        estimate: preflight's cost estimate.
        plan: preflight's per-device memory table and kernel budgets on this host.
        run_dir: the run folder every file goes to (set once the run is opened).
        tracker: the experiment tracker (set once the run is opened).
        progress: phase and step bars.
        components: transformer, prompt encoder and VAE (set by the "build model" step).
        noise: [1, 16, F, H, W] initial noise every arm starts from (set by "encode prompts").
        context: [1, L, text_dim] prompt embeddings (set by "encode prompts").
        negative_context: negative-prompt embeddings, None without guidance.
        text_encode_s: seconds spent encoding the prompts.
    """

    cfg: EvalConfig
    geometry: VideoGeometry
    sampler: Sampler
    shift: float
    attention: AttentionSetup
    estimate: preflight.CostEstimate
    progress: Progress
    plan: RunPlan | None = None
    run_dir: Path | None = None
    tracker: Tracker | None = None
    components: Components | None = None
    noise: jax.Array | None = None
    context: jax.Array | None = None
    negative_context: jax.Array | None = None
    text_encode_s: float = float("nan")

    def prepare_arm(self, label: str, attend: Any) -> PreparedArm:
        """Compiles one arm on the shared model, sampler, noise and prompts and runs it once
        (its result; the loop carries no per-step callback, so timed runs hold none)."""
        return prepare_arm(
            label,
            self.components.transformer,
            self.sampler,
            guidance_scale=self.cfg.guidance_scale,
            attend=attend,
            noise=self.noise,
            context=self.context,
            negative_context=self.negative_context,
            on_event=self.progress.event,
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
    # Every ``auto`` becomes this platform's concrete choice here, so the recorded config, the cache
    # key and the MLflow params name the tiles, executors and dtype that were actually run.
    cfg = kernel_choice.resolve(to_config(cfg))
    progress = Progress(PHASES, enabled=cfg.progress.enabled)
    started = time.perf_counter()
    progress.phase("preflight")
    comparison = _preflight(cfg, progress)  # nothing is allocated before this passes
    run_dir, tracker = _open_run(cfg)
    comparison.run_dir, comparison.tracker = run_dir, tracker
    try:
        _record_start(comparison)
        metrics = _compare(comparison)
        metrics.update(comparison.estimate.as_metrics())
        metrics["total_wall_s"] = time.perf_counter() - started
        gate = _finish(comparison, metrics)
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


def _preflight(cfg: EvalConfig, progress: Progress) -> Comparison:
    """Estimates the cost, refuses what does not fit, and builds the attention functions."""
    a = admit(cfg)
    return Comparison(
        cfg, a.geometry, a.sampler, a.shift, a.attention, a.estimate, progress, a.plan
    )


def _open_run(cfg: EvalConfig) -> tuple[Path, Tracker]:
    """Creates the run folder and the tracker's run."""
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
    return run_dir, tracker


def _record_start(comparison: Comparison) -> None:
    """``config.yaml``, then the config as params, the mesh, environment tags and the estimate."""
    resolved = to_plain_dict(comparison.cfg)
    (comparison.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    tracker = comparison.tracker
    tracker.log_params(flatten(resolved))
    if comparison.attention.mesh is not None:
        tracker.log_params(describe_mesh(comparison.attention.mesh))
    tracker.set_tags({**environment_tags(), "run_dir": str(comparison.run_dir.resolve())})
    tracker.log_metrics(comparison.estimate.as_metrics())
    if comparison.plan is not None:
        tracker.log_metrics(comparison.plan.as_metrics())
        plan_md = comparison.plan.memory.to_markdown() + "\n\n" + comparison.plan.budget_markdown()
        (comparison.run_dir / "memory_plan.md").write_text(plan_md.rstrip() + "\n")


def _finish(comparison: Comparison, metrics: dict[str, Any]) -> GateResult:
    """Checks the gate, writes ``metrics.json`` and ``report.md``, and closes the tracker's run."""
    cfg, run_dir, tracker = comparison.cfg, comparison.run_dir, comparison.tracker
    gate = check_gate(
        metrics,
        min_psnr_db=cfg.gate.min_psnr_db,
        min_speedup=cfg.gate.min_speedup,
        min_worst_frame_psnr_db=cfg.gate.min_worst_frame_psnr_db,
    )
    metrics["gate_passed"] = gate.passed
    artifacts.write_metrics(run_dir, metrics)
    artifacts.write_report(run_dir, cfg, metrics, gate.failures)
    tracker.log_metrics({k: v for k, v in metrics.items() if isinstance(v, int | float)})
    tracker.set_tags({"gate": "passed" if gate.passed else "failed"})
    tracker.log_artifacts(
        run_dir, exclude=() if cfg.logger.log_videos else artifacts.VIDEO_PATTERNS
    )
    tracker.finish("FINISHED")
    return gate


def _compare(comparison: Comparison) -> dict[str, Any]:
    """The comparison proper: model, prompts, the arms timed side by side, quality and files.

    Every run compiles and times its dense arm, its second dense control and its sparse arm in
    this process, round-robin, whatever the cache holds: a speedup is never a ratio of medians
    taken under different loads. The dense-arm cache only saves decoding the dense videos.

    Returns:
        The comparison's metrics (run-level ones such as the estimate and the gate come later).
    """
    _build_model(comparison)
    _encode_prompts(comparison)
    prepared = _prepare_arms(comparison)
    comparison.progress.phase("timing (interleaved)")
    times = time_arms_interleaved(
        prepared, comparison.cfg.warm_runs, on_event=comparison.progress.event
    )
    dense = _dense_arms(comparison, prepared, times)
    sparse = prepared["sparse"].result(times["sparse"])
    stats, routing_check = _routing_statistics(comparison, sparse)
    comparison.progress.phase("decode")
    decode_arm(sparse, comparison.components.decode)
    comparison.progress.phase("quality")
    quality, metrics = _quality(comparison, dense, sparse)
    metrics.update(_speed_and_setup(comparison, dense, sparse))
    metrics.update(routing_check)
    comparison.tracker.set_tags(
        {
            **dense.provenance(),
            "timing": "fresh, interleaved (dense, sparse, noise floor round-robin)",
            **timed_window_tags([dense.dense, sparse, dense.noise_floor]),
        }
    )
    comparison.progress.phase("artifacts")
    metrics.update(_write_artifacts(comparison, dense, sparse, quality, stats))
    return metrics


def _build_model(comparison: Comparison) -> None:
    """Transformer, prompt encoder and VAE, on the mesh when there is one."""
    comparison.progress.phase("build model")
    cfg = comparison.cfg
    # On a mesh the weights are placed (or, for checkpoints, streamed) onto it here, before any
    # DenoiseLoop captures them.
    comparison.components = build_components(
        cfg.model, cfg.dtype, cfg.cache_dir, comparison.attention.mesh
    )


def _encode_prompts(comparison: Comparison) -> None:
    """Prompt embeddings, timed, and the one initial noise every arm starts from."""
    comparison.progress.phase("encode prompts")
    cfg, components = comparison.cfg, comparison.components
    start = time.perf_counter()
    # One encoder load (on a cache miss) for both prompts, released before the denoising loop.
    with components.prompt_encoder.session():
        comparison.context = jnp.asarray(components.encode([cfg.prompt]))
        if uses_guidance(cfg.guidance_scale, cfg.negative_prompt):
            comparison.negative_context = jnp.asarray(components.encode([cfg.negative_prompt]))
    comparison.text_encode_s = time.perf_counter() - start
    comparison.noise = jax.random.normal(
        jax.random.key(cfg.seed), (1, *comparison.geometry.latent_shape()), jnp.float32
    )


def _prepare_arms(comparison: Comparison) -> dict[str, PreparedArm]:
    """Every timed arm compiled and run once, in the order the timing rounds take them."""
    comparison.progress.phase("compile arms")
    attention = comparison.attention
    arms = {
        "dense": comparison.prepare_arm("dense", attention.dense),
        "sparse": comparison.prepare_arm("sparse", attention.sparse),
    }
    if comparison.cfg.noise_floor:
        # Timed like the dense arm: it is the second dense control the headline speedup uses.
        arms["noise_floor"] = comparison.prepare_arm("noise_floor", attention.noise_floor)
    return arms


def _dense_arms(
    comparison: Comparison, prepared: dict[str, PreparedArm], times: dict[str, Any]
) -> DenseArms:
    """The dense arm and its noise floor with this run's timings; their decoded frames come from
    the cache when it holds them for these exact latents, else they are decoded and stored."""
    cfg = comparison.cfg
    cache = ArmCache(Path(cfg.cache_dir) / "dense_arms")
    # step_callback keeps its default, False: no timed loop carries one (``prepare_arm``).
    key = dense_arm_key(cfg, comparison.components.identity, comparison.shift)
    dense_labels = [label for label in prepared if label != "sparse"]
    fresh = {label: prepared[label].result(times[label]) for label in dense_labels}
    cached = load_dense_arms(cache, key)
    if cached is not None and cached.holds(fresh):
        for label, arm in fresh.items():
            stored = cached.dense if label == "dense" else cached.noise_floor
            arm.frames, arm.decode_s = stored.frames, stored.decode_s
        return dataclasses.replace(
            cached, dense=fresh["dense"], noise_floor=fresh.get("noise_floor")
        )
    if cached is not None:
        log.warning(
            "dense arm: the cache entry %s holds other latents than this run computed (its key "
            "misses something that changes them); decoding afresh and replacing it",
            key,
        )
    for arm in fresh.values():
        decode_arm(arm, comparison.components.decode)
    arms = DenseArms(fresh["dense"], fresh.get("noise_floor"), key, hit=False)
    store_dense_arms(cache, arms)
    return arms


def _routing_statistics(
    comparison: Comparison, sparse: ArmResult
) -> tuple[RoutingStats | None, dict[str, float]]:
    """When any step routes: one more, untimed run that records the routing, and how far its
    latents are from the timed sparse arm's (they must agree: the statistics describe that run).

    Raises:
        RuntimeError: the recorded run's latents differ from the sparse arm's beyond rounding.
    """
    comparison.progress.phase("routing statistics")
    attention = comparison.attention
    if attention.recording is None:
        return None, {}
    # A separate run records routing, so recording never slows the timed sparse arm.
    recorded = comparison.prepare_arm("sparse (recording routing)", attention.recording)
    diff = check_same_latents(
        recorded.latents, sparse.latents, comparison.cfg.dtype.value, what="routing-recording run"
    )
    return attention.collect_stats(), {"routing_recording_max_abs_latent_diff": diff}


def _quality(
    comparison: Comparison, dense: DenseArms, sparse: ArmResult
) -> tuple[VideoQuality, dict[str, Any]]:
    """Encodes the videos and measures the sparse arm (and the noise floor) against the dense arm."""
    videos = artifacts.write_arm_videos(
        comparison.run_dir, dense.dense, sparse, dense.noise_floor, comparison.cfg
    )
    sparse_q = measure(
        videos.dense, videos.sparse, dense.dense, sparse, codec_video=videos.dense_mp4
    )
    floor_q = None
    if dense.noise_floor is not None:
        floor_q = measure(
            videos.dense,
            videos.noise_floor,
            dense.dense,
            dense.noise_floor,
            codec_video=videos.dense_mp4,
        )
    return sparse_q, quality_metrics(sparse_q, floor_q)


def _speed_and_setup(comparison: Comparison, dense: DenseArms, sparse: ArmResult) -> dict[str, Any]:
    """Timing metrics, where the dense arm came from, and what the sparse side was."""
    kernel = comparison.cfg.kernel
    executors = {
        "dense": kernel.dense_executor.value,
        "noise_floor": kernel.noise_floor_executor.value,
    }
    metrics: dict[str, Any] = timing_metrics(
        dense.dense, sparse, dense.noise_floor, executors=executors
    )
    metrics["dense_control"] = fastest_control(metrics)
    metrics["text_encode_s"] = comparison.text_encode_s
    metrics.update(dense.metrics())
    metrics["tokens"] = comparison.geometry.tokens
    metrics["schedule"] = comparison.cfg.schedule.name
    metrics.update(comparison.attention.describe())
    return metrics


def _write_artifacts(
    comparison: Comparison,
    dense: DenseArms,
    sparse: ArmResult,
    quality: VideoQuality,
    stats: RoutingStats | None,
) -> dict[str, Any]:
    """Side-by-side video, per-frame quality, routing statistics and timings; returns the
    metrics only these files' inputs give (the overall routing fraction)."""
    run_dir, tracker = comparison.run_dir, comparison.tracker
    artifacts.write_side_by_side(run_dir, dense.dense, sparse, comparison.cfg)
    artifacts.write_frame_quality(run_dir, quality)
    log_frame_curves(tracker, quality.frames.psnr_db, quality.frames.ssim)
    metrics: dict[str, Any] = {}
    if stats is not None:
        comparison.attention.save_stats(stats, run_dir)
        log_routing_curve(tracker, stats.temporal_fraction())  # [steps, layers], NaN where dense
        metrics["routing_temporal_fraction"] = stats.overall_temporal_fraction()
    artifacts.write_timings(run_dir, dense.dense, sparse)
    return metrics
