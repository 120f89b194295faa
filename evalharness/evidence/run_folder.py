"""Run-folder artifacts: videos, metrics.json, report.md, per-frame quality, timings, the console
summary, and the headline metrics that the summary and the sweep table show."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evalharness.arms import ArmResult  # noqa: E402
from evalharness.config import EvalConfig  # noqa: E402
from evalharness.evidence.dense_cache import arm_meta  # noqa: E402
from evalharness.evidence.quality import CodecNoise, FFmpegPSNR, FrameQuality, VideoQuality  # noqa: E402
from evalharness.evidence.video import encode_lossless, encode_mp4, lossless_path, side_by_side  # noqa: E402
from evalharness.formatting import format_cell, markdown_table, markdown_text  # noqa: E402
from evalharness.metric_names import Metric, MetricValue, RunMetrics

# Name patterns of the video files (viewable mp4s, lossless mkvs), which
# ``logger.log_videos=false`` keeps out of MLflow.
VIDEO_PATTERNS = ("*.mp4", "*.mkv")


@dataclass(frozen=True)
class HeadlineMetric:
    """A metric that sums up a run, with how to show it.

    Attributes:
        key: the metric's key in the run's metrics.
        title: column title in the sweep table.
        fmt: ``str.format`` pattern, as :func:`evalharness.formatting.format_cell` takes it.
    """

    key: str
    title: str
    fmt: str


# The headline metrics, in table order: the sweep table shows them all, each job's summary row
# records them, and the console summary prints a subset with the same formats.
HEADLINE_METRICS = (
    HeadlineMetric("schedule", "schedule", "{}"),
    HeadlineMetric("schedule_kept_fraction", "kept fraction", "{:.3f}"),
    HeadlineMetric("dense_median_s", "dense median s", "{:.3f}"),
    HeadlineMetric("sparse_median_s", "sparse median s", "{:.3f}"),
    HeadlineMetric(Metric.SPEEDUP, Metric.SPEEDUP, "{:.3f}x"),
    HeadlineMetric("dense_control", "vs", "{}"),
    HeadlineMetric("speedup_vs_dense_arm", "speedup vs dense arm", "{:.3f}x"),
    HeadlineMetric(Metric.PSNR_DB, "PSNR dB", "{:.2f}"),
    HeadlineMetric(Metric.PSNR_WORST_FRAME_DB, "worst frame dB", "{:.2f}"),
    HeadlineMetric(Metric.NOISE_FLOOR_PSNR_DB, "noise floor dB", "{:.2f}"),
    HeadlineMetric(Metric.GAP_TO_NOISE_FLOOR_DB, "gap to floor dB", "{:.2f}"),
    HeadlineMetric(Metric.SSIM_FRAMES, "SSIM", "{:.4f}"),
    HeadlineMetric("dense_cache", "dense arm", "{}"),
)
_HEADLINE_BY_KEY = {h.key: h for h in HEADLINE_METRICS}


def headline_columns() -> list[tuple[str, str, str]]:
    """The headline metrics as ``(title, key, fmt)`` Markdown table columns."""
    return [(h.title, h.key, h.fmt) for h in HEADLINE_METRICS]


def headline_row(metrics: Mapping[str, MetricValue]) -> dict[str, MetricValue]:
    """A run's headline metrics (None where missing) and its run folder, for the sweep table."""
    row = {h.key: metrics.get(h.key) for h in HEADLINE_METRICS}
    row["run_dir"] = metrics.get("run_dir")
    return row


def _headline_cell(metrics: Mapping[str, MetricValue], key: str) -> str:
    return format_cell(metrics.get(key), _HEADLINE_BY_KEY[key].fmt)


@dataclass(frozen=True)
class ArmVideos:
    """The encoded videos of a comparison's arms (the noise floor's are None when not run).

    Attributes:
        dense: ``dense.lossless.mkv``, the dense arm's measurement video (FFV1, exact frames);
            ``dense``, ``sparse`` and ``noise_floor`` are what :func:`evalharness.evidence.quality.measure`
            takes, so FFmpeg's PSNR of them carries no codec noise.
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


def write_side_by_side(run_dir: Path, dense: ArmResult, sparse: ArmResult, cfg: EvalConfig) -> Path:
    """``side_by_side.mp4``: dense | sparse | amplified difference."""
    frames = side_by_side(dense.frames, sparse.frames)
    return encode_mp4(frames, run_dir / "side_by_side.mp4", fps=cfg.fps, crf=cfg.crf)


def write_frame_quality(run_dir: Path, quality: VideoQuality) -> tuple[Path, Path]:
    """``psnr_per_frame.png`` and ``quality_per_frame.npz``: the per-frame curves of a measurement
    (raw-frame PSNR and SSIM, FFmpeg's PSNR of the lossless videos, the reference mp4's codec
    noise)."""
    plot = plot_frame_psnr(
        run_dir / "psnr_per_frame.png", quality.frames, quality.encoded, quality.codec
    )
    arrays = run_dir / "quality_per_frame.npz"
    np.savez(
        arrays,
        psnr_frames_db=quality.frames.psnr_db,
        ssim_frames=quality.frames.ssim,
        psnr_ffmpeg_db=quality.encoded.per_frame_db,
        codec_psnr_frames_db=quality.codec.per_frame_db,
    )
    return plot, arrays


def write_timings(run_dir: Path, dense: ArmResult, sparse: ArmResult) -> Path:
    """``timings.json``: every warm run, compile, warm-up and decode time of both arms."""
    path = run_dir / "timings.json"
    path.write_text(json.dumps({"dense": arm_meta(dense), "sparse": arm_meta(sparse)}, indent=2))
    return path


def write_latents(run_dir: Path, arms: dict[str, ArmResult | None]) -> Path:
    """``latents.npz``: each arm's final float32 latents [1, 16, F, H, W], by arm label."""
    path = run_dir / "latents.npz"
    np.savez(path, **{label: arm.latents for label, arm in arms.items() if arm is not None})
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_metrics(run_dir: Path, metrics: RunMetrics) -> Path:
    """Writes ``metrics.json`` (inf as the string "inf", NaN as null, so it stays valid JSON)."""
    path = run_dir / "metrics.json"
    path.write_text(
        json.dumps({k: _jsonable(v) for k, v in metrics.items()}, indent=2, default=str)
    )
    return path


def plot_frame_psnr(
    path: Path, frames: FrameQuality, ff: FFmpegPSNR, codec: CodecNoise | None = None
) -> Path:
    """Per-frame PSNR (raw frames, FFmpeg on the lossless videos, and the codec noise of the
    reference's viewable mp4 for scale) and SSIM. Identical frames (inf) are left out."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    x = range(len(frames.psnr_db))
    ax1.plot(x, frames.psnr_db, marker="o", label="raw frames (gated)")
    if len(ff.per_frame_db) == len(frames.psnr_db):
        ax1.plot(x, ff.per_frame_db, marker=".", label="lossless videos (FFmpeg psnr)")
    if codec is not None and len(codec.per_frame_db) == len(frames.psnr_db):
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


_TIMING_ROWS = (
    ("Dense denoising, median (min-max)", "dense"),
    ("Second dense control (noise-floor arm), median (min-max)", "noise_floor"),
    ("Sparse denoising, median (min-max)", "sparse"),
)
# (title, metric key, format, unit); the key None marks the compile row, which shows two metrics.
_REPORT_ROWS = (
    ("Speedup over the fastest dense control", Metric.SPEEDUP, "{:.3f}", "x"),
    ("Fastest dense control", "dense_control", "{}", ""),
    ("Speedup over our dense arm (kernel effect)", "speedup_vs_dense_arm", "{:.3f}", "x"),
    ("PSNR, raw frames (gated; from the mean MSE)", Metric.PSNR_DB, "{:.2f}", " dB"),
    ("PSNR, worst frame", Metric.PSNR_WORST_FRAME_DB, "{:.2f}", " dB"),
    ("PSNR, per frame (mean of dB)", "psnr_frames_db", "{:.2f}", " dB"),
    ("SSIM, per frame (mean)", Metric.SSIM_FRAMES, "{:.4f}", ""),
    ("Noise floor: dense vs dense, raw-frame PSNR", Metric.NOISE_FLOOR_PSNR_DB, "{:.2f}", " dB"),
    ("Noise floor: worst frame", "noise_floor_psnr_worst_frame_db", "{:.2f}", " dB"),
    ("Gap to the noise floor (floor - sparse)", Metric.GAP_TO_NOISE_FLOOR_DB, "{:.2f}", " dB"),
    ("PSNR, FFmpeg on the lossless videos (cross-check)", "psnr_ffmpeg_db", "{:.2f}", " dB"),
    ("Codec noise: dense.mp4 vs its raw frames", "codec_psnr_db", "{:.2f}", " dB"),
    (
        "Schedule kept fraction (dense steps/layers counted)",
        "schedule_kept_fraction",
        "{:.4f}",
        "",
    ),
    ("Sparse mask density", "mask_density", "{:.4f}", ""),
    ("Heads routed temporal (mean)", "routing_temporal_fraction", "{:.3f}", ""),
    ("Compile dense / sparse", None, "{}", ""),
    ("Text encoding", "text_encode_s", "{:.2f}", " s"),
    ("VAE decode (sparse arm)", "decode_sparse_s", "{:.2f}", " s"),
    ("Dense arm", "dense_cache", "{}", ""),
)
_REPORT_COLUMNS = (("metric", "metric", "{}"), ("value", "value", "{}"))
_REPORT_FILES = (
    "`dense.mp4`, `sparse.mp4`, `noise_floor.mp4` (to watch: H.264 yuv420p, lossy), "
    "`side_by_side.mp4` (dense | sparse | 8x difference), `dense.lossless.mkv`, "
    "`sparse.lossless.mkv`, `noise_floor.lossless.mkv` (to measure: FFV1, the exact frames), "
    "`psnr_per_frame.png`, `quality_per_frame.npz`, `routing_heatmap.png`, `routing_stats.npz`, "
    "`metrics.json`, `config.yaml`."
)


def _report_table(m: Mapping[str, Any]) -> list[str]:
    """The report's metric table, one line per row."""

    def seconds(key: str, fmt: str) -> str:
        return format_cell(m.get(key), fmt)

    rows = []
    for title, arm in _TIMING_ROWS:
        median, low, high = (seconds(f"{arm}_{s}_s", "{:.3f}") for s in ("median", "min", "max"))
        rows.append({"metric": title, "value": f"{median} s ({low}-{high})"})
    for title, key, fmt, unit in _REPORT_ROWS:
        if key is None:
            compile_dense = seconds("compile_dense_s", "{:.2f}")
            value = f"{compile_dense} s / {seconds('compile_sparse_s', '{:.2f}')} s"
        else:
            value = f"{format_cell(m.get(key), fmt)}{unit if m.get(key) is not None else ''}"
        rows.append({"metric": title, "value": value})
    return markdown_table(rows, _REPORT_COLUMNS).splitlines()


def gate_section(cfg: EvalConfig, gate_failures: Sequence[str]) -> list[str]:
    """The report's verdict: no thresholds, the failed ones, or a pass with the thresholds set."""
    gate = cfg.gate
    # getattr: a configuration from before the worst-frame threshold has no such field.
    worst = getattr(gate, "min_worst_frame_psnr_db", None)
    thresholds = [
        f"{title} {value}{unit}"
        for title, value, unit in (
            ("min PSNR", gate.min_psnr_db, " dB"),
            ("min worst-frame PSNR", worst, " dB"),
            ("min speedup", gate.min_speedup, ""),
        )
        if value is not None
    ]
    if not thresholds:
        return [
            "Not gated: no thresholds set (gate.min_psnr_db, gate.min_worst_frame_psnr_db, gate.min_speedup)."
        ]
    if gate_failures:
        return [f"- FAILED: {f}" for f in gate_failures]
    return [f"Passed ({', '.join(thresholds)})."]


def write_report(
    run_dir: Path, cfg: EvalConfig, metrics: RunMetrics, gate_failures: Sequence[str]
) -> Path:
    """Writes ``report.md``: the comparison in one table, then the settings and the verdict.

    Args:
        run_dir: the run folder.
        cfg: the run's configuration (title, prompt line, gate thresholds).
        metrics: the run's metrics.
        gate_failures: one line per missed gate threshold (empty when the gate passed).

    Returns:
        The report's path.
    """
    lines = [
        f"# {cfg.model.name} · {cfg.resolution.name} · schedule {markdown_text(cfg.schedule.name)}",
        "",
        f"Prompt: “{markdown_text(cfg.prompt)}” · seed {cfg.seed} · {cfg.steps} steps ({cfg.sampler}) · "
        f"guidance {cfg.guidance_scale} · dtype {cfg.dtype} · {metrics.get('tokens', 0):,} tokens",
        "",
        *_report_table(metrics),
        "",
        "## Gate",
        "",
        *gate_section(cfg, gate_failures),
        "",
        "## Files",
        "",
        _REPORT_FILES,
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def summary_lines(metrics: RunMetrics) -> str:
    """The few lines printed at the end of a run: headline metrics, then the run folder."""

    def cell(key: str) -> str:
        return _headline_cell(metrics, key)

    return (
        f"dense {cell('dense_median_s')} s | sparse {cell('sparse_median_s')} s"
        f" | speedup {cell('speedup')} vs {cell('dense_control')}"
        f" ({cell('speedup_vs_dense_arm')} vs our dense arm) | PSNR {cell('psnr_db')} dB"
        f" (worst frame {cell('psnr_worst_frame_db')} dB; noise floor"
        f" {cell('noise_floor_psnr_db')} dB, gap {cell('gap_to_noise_floor_db')} dB)"
        f" | SSIM {cell('ssim_frames')}"
        f" | dense arm {cell('dense_cache')}\n"
        f"run folder: {metrics.get('run_dir')}"
    )
