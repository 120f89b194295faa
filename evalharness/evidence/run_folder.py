"""A pair's files in its folder (videos, per-frame quality, routing statistics, timings, latents,
``metrics.json``) and the headline metrics that the console summary and the sweep table show.
The plots are drawn here, on the harness side, so the kernels never import matplotlib."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evalharness.arms import ArmResult  # noqa: E402
from evalharness.config import EvalConfig  # noqa: E402
from evalharness.evidence.dense_cache import DenseArms, arm_meta  # noqa: E402
from evalharness.evidence.lpips import lpips_frames  # noqa: E402
from evalharness.evidence.quality import VideoQuality, measure, quality_metrics  # noqa: E402
from evalharness.evidence.video import encode_lossless, encode_mp4, lossless_path, side_by_side  # noqa: E402
from evalharness.formatting import format_cell  # noqa: E402
from evalharness.metric_names import (  # noqa: E402
    Metric,
    MetricValue,
    RunMetrics,
    on_random_weights,
    slower_note,
)
from kernels.policy.routing_stats import RoutingStats  # noqa: E402

# Name patterns of the video files (viewable mp4s, lossless mkvs), which
# ``logger.log_videos=false`` keeps out of MLflow.
VIDEO_PATTERNS = ("*.mp4", "*.mkv")


class HeadlineMetric(NamedTuple):
    """A metric that sums up a run, as a Markdown table column: its title in the sweep table, its
    key in the run's metrics, and its ``str.format`` pattern (as ``format_cell`` takes it)."""

    title: str
    key: str
    fmt: str


# The headline metrics, in table order: the sweep table shows them all, each job's summary row
# records them, and the console summary prints a subset with the same formats.
HEADLINE_METRICS = (
    HeadlineMetric("schedule", "schedule", "{}"),
    HeadlineMetric("kept fraction", "schedule_kept_fraction", "{:.3f}"),
    HeadlineMetric("dense median s", "dense_median_s", "{:.3f}"),
    HeadlineMetric("sparse median s", "sparse_median_s", "{:.3f}"),
    HeadlineMetric(Metric.SPEEDUP, Metric.SPEEDUP, "{:.3f}x"),
    HeadlineMetric("vs", "dense_control", "{}"),
    HeadlineMetric("speedup vs dense arm", "speedup_vs_dense_arm", "{:.3f}x"),
    HeadlineMetric("PSNR dB", Metric.PSNR_DB, "{:.2f}"),
    HeadlineMetric("worst frame dB", Metric.PSNR_WORST_FRAME_DB, "{:.2f}"),
    HeadlineMetric("noise floor dB", Metric.NOISE_FLOOR_PSNR_DB, "{:.2f}"),
    HeadlineMetric("gap to floor dB", Metric.GAP_TO_NOISE_FLOOR_DB, "{:.2f}"),
    HeadlineMetric("SSIM", Metric.SSIM_FRAMES, "{:.4f}"),
    HeadlineMetric("LPIPS", Metric.LPIPS, "{:.4f}"),
    HeadlineMetric("dense arm", "dense_cache", "{}"),
)


def headline_columns() -> list[HeadlineMetric]:
    """The headline metrics as ``(title, key, fmt)`` Markdown table columns."""
    return list(HEADLINE_METRICS)


def headline_row(metrics: Mapping[str, MetricValue]) -> dict[str, MetricValue]:
    """A run's headline metrics (None where missing) and its run folder, for the sweep table."""
    row = {h.key: metrics.get(h.key) for h in HEADLINE_METRICS}
    row["run_dir"] = metrics.get("run_dir")
    return row


def summary_lines(metrics: RunMetrics) -> str:
    """The few lines printed at the end of a run: headline metrics, then the run folder. On
    random weights the quality figures are marked meaningless where they are printed."""
    formats = {h.key: h.fmt for h in HEADLINE_METRICS}

    def cell(key: str) -> str:
        return format_cell(metrics.get(key), formats[key])

    quality = (
        f"PSNR {cell('psnr_db')} dB (worst frame {cell('psnr_worst_frame_db')} dB; noise floor"
        f" {cell('noise_floor_psnr_db')} dB, gap {cell('gap_to_noise_floor_db')} dB)"
        f" | SSIM {cell('ssim_frames')} | LPIPS {cell('lpips')}"
    )
    if on_random_weights(metrics):
        quality = f"[random weights: quality meaningless] {quality}"
    return (
        f"dense {cell('dense_median_s')} s | sparse {cell('sparse_median_s')} s"
        f" | speedup {cell('speedup')} vs {cell('dense_control')}"
        f" ({cell('speedup_vs_dense_arm')} vs our dense arm) | {quality}"
        f" | dense arm {cell('dense_cache')}\n"
        + (f"note: {note}\n" if (note := slower_note(metrics)) else "")
        + f"run folder: {metrics.get('run_dir')}"
    )


@dataclass(frozen=True)
class ArmVideos:
    """The encoded videos of a comparison's arms (the noise floor's are None when not run).

    Attributes:
        dense: ``dense.lossless.mkv``, the dense arm's measurement video (FFV1, exact frames), as
            ``sparse`` and ``noise_floor``: FFmpeg's PSNR of them carries no codec noise.
        sparse: ``sparse.lossless.mkv``.
        noise_floor: ``noise_floor.lossless.mkv`` or None.
        dense_mp4: ``dense.mp4``, the viewable video (H.264 CRF ``cfg.crf`` yuv420p), whose
            codec noise ``codec_psnr_db`` reports.
        sparse_mp4: ``sparse.mp4``.
        noise_floor_mp4: ``noise_floor.mp4`` or None.
    """

    dense: Path
    sparse: Path
    noise_floor: Path | None
    dense_mp4: Path
    sparse_mp4: Path
    noise_floor_mp4: Path | None


def write_arm_videos(
    run_dir: Path,
    dense: ArmResult,
    sparse: ArmResult,
    noise_floor: ArmResult | None,
    cfg: EvalConfig,
) -> ArmVideos:
    """Encodes each decoded arm twice at the configured frame rate: ``<label>.mp4`` to watch
    (CRF ``cfg.crf`` yuv420p) and ``<label>.lossless.mkv`` to measure (FFV1, exact frames)."""

    def encode(arm: ArmResult) -> tuple[Path, Path]:
        mp4 = encode_mp4(arm.frames, run_dir / f"{arm.label}.mp4", fps=cfg.fps, crf=cfg.crf)
        return encode_lossless(arm.frames, lossless_path(mp4), fps=cfg.fps), mp4

    (dense_mkv, dense_mp4), (sparse_mkv, sparse_mp4) = encode(dense), encode(sparse)
    floor_mkv, floor_mp4 = encode(noise_floor) if noise_floor is not None else (None, None)
    return ArmVideos(dense_mkv, sparse_mkv, floor_mkv, dense_mp4, sparse_mp4, floor_mp4)


def measure_videos(
    folder: Path,
    dense: DenseArms,
    sparse: ArmResult,
    cfg: EvalConfig,
    timed: Callable[[str], AbstractContextManager] = lambda phase: nullcontext(),
) -> tuple[VideoQuality, dict[str, float]]:
    """Encodes every arm's videos into ``folder`` and measures the sparse arm (and the noise
    floor) against the dense arm, from the lossless files and the raw frames.

    Args:
        timed: ``timed("videos")`` and ``timed("quality")`` wrap the encodes and the measures
            (the run's phase ledger).

    Returns:
        The sparse arm's measurement (its per-frame curves) and the quality metrics.
    """
    with timed("videos"):
        videos = write_arm_videos(folder, dense.dense, sparse, dense.noise_floor, cfg)

    def against_dense(video: Path, arm: ArmResult, lpips: np.ndarray) -> VideoQuality:
        return measure(
            videos.dense, video, dense.dense, arm, codec_video=videos.dense_mp4, lpips=lpips
        )

    with timed("quality"):
        floor = dense.noise_floor
        # LPIPS of both arms in one pass, the dense frames' features computed once.
        arms = [arm.frames for arm in (sparse, floor) if arm is not None]
        lpips = lpips_frames(dense.dense.frames, *arms)
        sparse_q = against_dense(videos.sparse, sparse, lpips[0])
        floor_q = None if floor is None else against_dense(videos.noise_floor, floor, lpips[1])
    return sparse_q, quality_metrics(sparse_q, floor_q)


def write_side_by_side(run_dir: Path, dense: ArmResult, sparse: ArmResult, cfg: EvalConfig) -> Path:
    """``side_by_side.mp4``: dense | sparse | amplified difference."""
    frames = side_by_side(dense.frames, sparse.frames)
    return encode_mp4(frames, run_dir / "side_by_side.mp4", fps=cfg.fps, crf=cfg.crf)


def write_frame_quality(run_dir: Path, quality: VideoQuality) -> tuple[Path, Path]:
    """``psnr_per_frame.png`` and ``quality_per_frame.npz``: the per-frame curves of a measurement
    (raw-frame PSNR, SSIM and LPIPS, FFmpeg's PSNR of the lossless videos, the reference mp4's
    codec noise); identical frames (inf) are left out of the plot."""
    frames, ff, codec = quality.frames, quality.encoded, quality.codec
    plot = run_dir / "psnr_per_frame.png"
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    x = range(len(frames.psnr_db))
    ax1.plot(x, frames.psnr_db, marker="o", label="raw frames (gated)")
    if len(ff.per_frame_db) == len(frames.psnr_db):
        ax1.plot(x, ff.per_frame_db, marker=".", label="lossless videos (FFmpeg psnr)")
    if len(codec.per_frame_db) == len(frames.psnr_db):
        ax1.plot(
            x, codec.per_frame_db, ls="--", c="grey", label=f"codec noise ({codec.video.name})"
        )
    ax1.set_ylabel("PSNR vs dense (dB)")
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.plot(x, frames.ssim, marker="o", color="tab:green")
    ax2.set_ylabel("SSIM")
    ax2.set_xlabel("frame")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
    plt.close(fig)
    arrays = run_dir / "quality_per_frame.npz"
    np.savez(
        arrays,
        psnr_frames_db=frames.psnr_db,
        ssim_frames=frames.ssim,
        lpips_frames=quality.lpips,
        psnr_ffmpeg_db=ff.per_frame_db,
        codec_psnr_frames_db=codec.per_frame_db,
    )
    return plot, arrays


def plot_temporal_fraction(stats: RoutingStats, path: str | Path, *, title: str = "") -> Path:
    """Writes the step x layer heat map of the temporal fraction as a PNG and returns its path:
    dense cells grey, the colour scale fixed to [0, 1] so maps compare across runs.

    Args:
        stats: recorded routing statistics.
        path: output file (parent folders are created).
        title: optional figure title.
    """
    fraction = stats.temporal_fraction()  # [steps, layers]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps, layers = fraction.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.25 * layers + 2.0), max(3.0, 0.2 * steps + 1.5)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    image = ax.imshow(
        np.ma.masked_invalid(fraction),
        cmap=cmap,
        vmin=0.0,
        vmax=1.0,
        aspect="auto",
        origin="upper",
        interpolation="nearest",
    )
    ax.set_xlabel("layer")
    ax.set_ylabel("denoising step")
    ax.set_title(title or "fraction of heads routed temporal (grey: dense)")
    fig.colorbar(image, ax=ax, label="temporal fraction")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def save_routing_stats(stats: RoutingStats, run_dir: Path, schedule_name: str) -> None:
    """Writes ``routing_stats.npz`` (flags and errors per step, layer, batch and head, and the
    temporal fraction) and ``routing_heatmap.png`` into ``run_dir``, the heat map titled with
    ``schedule_name``."""
    np.savez(
        run_dir / "routing_stats.npz",
        temporal=stats.temporal,
        spatial_error=stats.spatial_error,
        temporal_error=stats.temporal_error,
        temporal_fraction=stats.temporal_fraction(),
    )
    plot_temporal_fraction(
        stats,
        run_dir / "routing_heatmap.png",
        title=f"heads routed temporal · schedule {schedule_name}",
    )


def write_pair_files(
    folder: Path,
    cfg: EvalConfig,
    dense: DenseArms,
    sparse: ArmResult,
    quality: VideoQuality,
    stats: RoutingStats | None,
    schedule: str,
) -> None:
    """A pair's files beside its videos: ``side_by_side.mp4``, the per-frame quality plot and
    arrays, the routing statistics (when recorded, titled with ``schedule``), ``timings.json``
    (every warm run, compile, warm-up and decode time of both arms) and, with ``save_latents``,
    ``latents.npz`` (each arm's final float32 latents [1, 16, F, H, W], by arm label)."""
    write_side_by_side(folder, dense.dense, sparse, cfg)
    write_frame_quality(folder, quality)
    if stats is not None:
        save_routing_stats(stats, folder, schedule)
    timings = {"dense": arm_meta(dense.dense), "sparse": arm_meta(sparse)}
    (folder / "timings.json").write_text(json.dumps(timings, indent=2))
    if cfg.save_latents:
        arms = {"dense": dense.dense, "sparse": sparse, "noise_floor": dense.noise_floor}
        latents = {label: arm.latents for label, arm in arms.items() if arm is not None}
        np.savez(folder / "latents.npz", **latents)


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_metrics(run_dir: Path, metrics: Mapping[str, MetricValue]) -> Path:
    """Writes ``metrics.json`` (inf as the string "inf", NaN as null, so it stays valid JSON)."""
    path = run_dir / "metrics.json"
    path.write_text(
        json.dumps({k: _jsonable(v) for k, v in metrics.items()}, indent=2, default=str)
    )
    return path
