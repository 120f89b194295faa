"""One (prompt, seed) pair of a comparison: its arms timed side by side, quality, and files.

:func:`compare_pair` takes arms compiled once per run and bound to this pair's noise and prompt
embeddings, and fills the pair's folder and tracker run.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from evalharness.admission import Admission, arm_executors
from evalharness.arms import (
    ArmResult,
    PreparedArm,
    decode_arm,
    fastest_control,
    prepare_arm,
    time_arms_interleaved,
    timed_window_tags,
    timing_metrics,
)
from evalharness.assembly import Components
from evalharness.comparison.progress import Progress
from evalharness.config import EvalConfig, NegativeControl, Pair
from evalharness.evidence import (
    ArmCache,
    DenseArms,
    dense_arm_key,
    load_dense_arms,
    measure_videos,
    store_dense_arms,
    write_pair_files,
)
from evalharness.metric_names import Metric, MetricValue, RunMetrics
from evalharness.phases import Phase
from evalharness.tracking import Tracker, log_frame_curves, log_routing_curve
from kernels.policy.routing_stats import RoutingStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Comparison:
    """A run's comparison stage, complete when created.

    Attributes:
        cfg: the validated configuration.
        plan: preflight's admission (geometry, sampler and shift, attention functions, FLOP
            count, per-device sizing).
        progress: phase bar.
        run_dir: the run folder every file goes to.
        tracker: the experiment tracker's run.
        components: transformer, prompt encoder and VAE.
        text_encode_s: seconds spent encoding the prompts.
    """

    cfg: EvalConfig
    plan: Admission
    progress: Progress
    run_dir: Path
    tracker: Tracker
    components: Components
    text_encode_s: float

    def prepare_arm(self, label: str, attend: Any, inputs: PairInputs) -> PreparedArm:
        """Compiles one arm (``dense``, ``sparse``, ``noise_floor``) on the shared model and
        sampler for ``inputs``' shapes and runs it once on them
        (:func:`evalharness.arms.prepare_arm`), each stage timed as its phase."""
        return prepare_arm(
            label,
            self.components.transformer,
            self.plan.sampler,
            guidance_scale=self.cfg.guidance_scale,
            attend=attend,
            noise=inputs.noise,
            context=inputs.context,
            negative_context=inputs.negative_context,
            on_event=self.progress.event,
            guidance_passes=self.cfg.guidance_passes.value,
            timed=lambda stage: self.progress.timed(Phase(f"{label} {stage}")),
        )

    def timed(self, phase: str) -> AbstractContextManager:
        """Times the enclosed work as the ledger's phase of that name."""
        return self.progress.timed(Phase(phase))

    def dense_key(self, pair: Pair) -> str:
        """The dense-arm cache key of one pair (its ``prompt`` and ``seed`` set, no suite)."""
        # step_callback keeps its default, False: no timed loop carries one (``prepare_arm``).
        cfg = dataclasses.replace(
            self.cfg, prompt=pair.prompt, seed=pair.seed, prompts=None, seeds=None
        )
        return dense_arm_key(cfg, self.components.identity, self.plan.shift)

    @property
    def cache(self) -> ArmCache:
        """The dense-arm cache."""
        return ArmCache(Path(self.cfg.cache_dir) / "dense_arms")


@dataclass
class PairInputs:
    """One pair's inputs to every arm.

    Attributes:
        pair: the (prompt, seed) pair.
        noise: [1, 16, F, H, W] initial noise from the pair's seed.
        context: [1, L, text_dim] prompt embeddings.
        negative_context: [1, L, text_dim] negative-prompt embeddings, None without guidance.
    """

    pair: Pair
    noise: jax.Array
    context: jax.Array
    negative_context: jax.Array | None

    @property
    def args(self) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """The compiled loop's arguments."""
        return self.noise, self.context, self.negative_context


@dataclass
class PairOutput:
    """Where one pair's files and tracking go.

    Attributes:
        folder: the pair's folder (the run folder for a single pair).
        tracker: the pair's tracker run (the run itself for a single pair).
        label: how logs name the pair (empty for a single pair).
    """

    folder: Path
    tracker: Tracker
    label: str = ""


def compare_pair(
    comparison: Comparison,
    inputs: PairInputs,
    arms: dict[str, PreparedArm],
    out: PairOutput,
    cached: DenseArms | None = None,
) -> RunMetrics:
    """Times the pair's arms round-robin, then decodes, measures and writes its files; returns
    the pair's metrics.

    Every arm is timed in this process, round-robin, whatever the cache holds (the cache only
    saves decoding the dense videos), so a speedup is never a ratio of medians taken under
    different loads; except with ``reuse_dense_timing=true`` and ``cached`` timings, when only the
    sparse arm is timed and ``dense_timing_reused`` says so (the gate refuses a speedup on it).

    Args:
        comparison: the run.
        inputs: the pair's inputs (``arms`` are bound to them).
        arms: prepared arms: "sparse", and "dense" (+ "noise_floor") unless ``cached`` is used.
        out: the pair's folder and tracker run.
        cached: cached dense arms whose timings are reused (``reuse_dense_timing``), or None.
    """
    progress, cfg = comparison.progress, comparison.cfg
    with comparison.timed(Phase.TIMING):
        progress.event(f"{out.label}timing interleaved".strip())
        times = time_arms_interleaved(arms, cfg.warm_runs, on_event=progress.event)
    with comparison.timed(Phase.VAE_COMPILE):  # once per run: later pairs find it compiled
        comparison.components.prepare_decode(tuple(arms["sparse"].latents.shape))
    dense = cached if cached is not None else _dense_arms(comparison, inputs.pair, arms, times)
    sparse = arms["sparse"].result(times["sparse"])
    stats = _routing_statistics(comparison)  # recorded by the sparse arm's warm-up run
    with comparison.timed(Phase.DECODE):
        progress.event(f"{out.label}decode and quality".strip())
        decode_arm(sparse, comparison.components.decode)
    quality, metrics = measure_videos(out.folder, dense, sparse, cfg, timed=comparison.timed)
    metrics.update(_speed_and_setup(comparison, dense, sparse))
    metrics[Metric.DENSE_TIMING_REUSED] = int(cached is not None)
    timing = "fresh, interleaved (dense, sparse, noise floor round-robin)"
    if cached is not None:
        timing = (
            f"sparse fresh; dense medians reused from the cache entry computed "
            f"{cached.created_at or 'at an unrecorded time'} on {cached.host or 'an unknown host'}"
            " (reuse_dense_timing=true)"
        )
    out.tracker.set_tags(
        {
            **dense.provenance(),
            "dense_control": str(metrics["dense_control"]),
            "timing": timing,
            **timed_window_tags([dense.dense, sparse, dense.noise_floor]),
        }
    )
    # The pair's files beside its videos, and its per-frame and routing curves in its tracker run.
    schedule = comparison.plan.attention.schedule.name
    with comparison.timed(Phase.VIDEOS):
        write_pair_files(out.folder, cfg, dense, sparse, quality, stats, schedule)
    with comparison.timed(Phase.LOGGING):
        log_frame_curves(out.tracker, quality.frames.psnr_db, quality.frames.ssim)
        if stats is not None:
            log_routing_curve(out.tracker, stats.temporal_fraction())  # [steps, layers]; dense NaN
    if stats is not None:
        metrics["routing_temporal_fraction"] = stats.overall_temporal_fraction()
    return RunMetrics.of(metrics)


def _dense_arms(
    comparison: Comparison, pair: Pair, prepared: dict[str, PreparedArm], times: dict[str, Any]
) -> DenseArms:
    """The dense arm and its noise floor with this run's timings; their decoded frames come from
    the cache when it holds them for these exact latents, else they are decoded and stored."""
    with comparison.timed(Phase.DECODE):
        return _decoded_dense_arms(comparison, pair, prepared, times)


def _decoded_dense_arms(
    comparison: Comparison, pair: Pair, prepared: dict[str, PreparedArm], times: dict[str, Any]
) -> DenseArms:
    cache = comparison.cache
    key = comparison.dense_key(pair)
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
            f"dense arm: the cache entry {key} holds other latents than this run computed (its "
            "key misses something that changes them); decoding afresh and replacing it"
        )
        cache.discard(key)  # store() keeps an existing entry: the stale one must go first
    for label, arm in fresh.items():
        comparison.progress.event(f"{label}: decode")  # a safe point between decodes
        decode_arm(arm, comparison.components.decode)
    arms = DenseArms(fresh["dense"], fresh.get("noise_floor"), key, hit=False)
    store_dense_arms(cache, arms)
    return arms


def _routing_statistics(comparison: Comparison) -> RoutingStats | None:
    """The routing the sparse arm's last warm-up run recorded (None when no step routes or
    ``routing_stats=false``): that run is the arm's own compiled loop, so the statistics describe
    exactly the timed computation, and no second run is made."""
    if records_routing(comparison) is None:
        return None
    return comparison.plan.attention.collect_stats()


def records_routing(comparison: Comparison) -> Any:
    """The sparse arm's recording attend when it records its routing (a routed schedule with
    ``routing_stats`` on), else None: the one rule for which attend the sparse arm compiles."""
    recording = comparison.plan.attention.recording
    return recording if comparison.cfg.routing_stats else None


def _speed_and_setup(
    comparison: Comparison, dense: DenseArms, sparse: ArmResult
) -> dict[str, MetricValue]:
    """Timing metrics, where the dense arm came from, and what the sparse side was."""
    metrics: dict[str, MetricValue] = timing_metrics(
        dense.dense, sparse, dense.noise_floor, executors=arm_executors(comparison.cfg)
    )
    metrics["dense_control"] = fastest_control(metrics)
    metrics["text_encode_s"] = comparison.text_encode_s
    metrics.update(dense.metrics())
    metrics["tokens"] = comparison.plan.geometry.tokens
    metrics["schedule"] = comparison.cfg.schedule.name
    control = NegativeControl(comparison.cfg.negative_control).value
    if control != "none":  # a sparse arm broken on purpose: every reader of the run must see it
        metrics["negative_control"] = control
    metrics.update(comparison.plan.attention.describe())
    return metrics
