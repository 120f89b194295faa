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
from evalharness.cache import arm_meta  # noqa: E402
from evalharness.config import EvalConfig  # noqa: E402
from evalharness.formatting import format_cell, markdown_table  # noqa: E402
from evalharness.quality import FFmpegPSNR, FrameQuality, VideoQuality  # noqa: E402
from evalharness.video import encode_mp4, side_by_side  # noqa: E402

# Name patterns of the video files, which ``logger.log_videos=false`` keeps out of MLflow.
VIDEO_PATTERNS = ("*.mp4",)


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
    HeadlineMetric("speedup", "speedup", "{:.3f}x"),
    HeadlineMetric("dense_control", "vs", "{}"),
    HeadlineMetric("speedup_vs_b0", "speedup vs B0", "{:.3f}x"),
    HeadlineMetric("psnr_ffmpeg_db", "PSNR FFmpeg dB", "{:.2f}"),
    HeadlineMetric("psnr_frames_db", "PSNR frames dB", "{:.2f}"),
    HeadlineMetric("ssim_frames", "SSIM", "{:.4f}"),
    HeadlineMetric("noise_floor_psnr_db", "noise floor dB", "{:.2f}"),
    HeadlineMetric("dense_cache", "dense arm", "{}"),
)
_HEADLINE_BY_KEY = {h.key: h for h in HEADLINE_METRICS}


def headline_columns() -> list[tuple[str, str, str]]:
    """The headline metrics as ``(title, key, fmt)`` Markdown table columns."""
    return [(h.title, h.key, h.fmt) for h in HEADLINE_METRICS]


def headline_row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A run's headline metrics (None where missing) and its run folder, for the sweep table."""
    row = {h.key: metrics.get(h.key) for h in HEADLINE_METRICS}
    row["run_dir"] = metrics.get("run_dir")
    return row


def _headline_cell(metrics: Mapping[str, Any], key: str) -> str:
    return format_cell(metrics.get(key), _HEADLINE_BY_KEY[key].fmt)


@dataclass(frozen=True)
class ArmVideos:
    """The encoded videos of a comparison's arms (``noise_floor`` is None when not run)."""

    dense: Path
    sparse: Path
    noise_floor: Path | None


def write_arm_videos(
    run_dir: Path,
    dense: ArmResult,
    sparse: ArmResult,
    noise_floor: ArmResult | None,
    cfg: EvalConfig,
) -> ArmVideos:
    """Encodes each decoded arm to ``<label>.mp4`` at the configured frame rate and quality."""

    def encode(arm: ArmResult) -> Path:
        return encode_mp4(arm.frames, run_dir / f"{arm.label}.mp4", fps=cfg.fps, crf=cfg.crf)

    dense_video, sparse_video = encode(dense), encode(sparse)
    floor_video = encode(noise_floor) if noise_floor is not None else None
    return ArmVideos(dense_video, sparse_video, floor_video)


def write_side_by_side(run_dir: Path, dense: ArmResult, sparse: ArmResult, cfg: EvalConfig) -> Path:
    """``side_by_side.mp4``: dense | sparse | amplified difference."""
    frames = side_by_side(dense.frames, sparse.frames)
    return encode_mp4(frames, run_dir / "side_by_side.mp4", fps=cfg.fps, crf=cfg.crf)


def write_frame_quality(run_dir: Path, quality: VideoQuality) -> tuple[Path, Path]:
    """``psnr_per_frame.png`` and ``quality_per_frame.npz``: the per-frame curves of a measurement."""
    plot = plot_frame_psnr(run_dir / "psnr_per_frame.png", quality.frames, quality.encoded)
    arrays = run_dir / "quality_per_frame.npz"
    np.savez(
        arrays,
        psnr_frames_db=quality.frames.psnr_db,
        ssim_frames=quality.frames.ssim,
        psnr_ffmpeg_db=quality.encoded.per_frame_db,
    )
    return plot, arrays


def write_timings(run_dir: Path, dense: ArmResult, sparse: ArmResult) -> Path:
    """``timings.json``: every warm run, compile, warm-up and decode time of both arms."""
    path = run_dir / "timings.json"
    path.write_text(json.dumps({"dense": arm_meta(dense), "sparse": arm_meta(sparse)}, indent=2))
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> Path:
    """Writes ``metrics.json`` (inf as the string "inf", NaN as null, so it stays valid JSON)."""
    path = run_dir / "metrics.json"
    path.write_text(
        json.dumps({k: _jsonable(v) for k, v in metrics.items()}, indent=2, default=str)
    )
    return path


def plot_frame_psnr(path: Path, frames: FrameQuality, ff: FFmpegPSNR) -> Path:
    """Per-frame PSNR (scikit-image on raw frames, FFmpeg on the encoded videos) and SSIM."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    x = range(len(frames.psnr_db))
    ax1.plot(x, frames.psnr_db, marker="o", label="raw frames (scikit-image)")
    if len(ff.per_frame_db) == len(frames.psnr_db):
        ax1.plot(x, ff.per_frame_db, marker=".", label="encoded (FFmpeg psnr)")
    ax1.set_ylabel("PSNR sparse vs dense (dB)")
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
    ("Speedup over the fastest dense control", "speedup", "{:.3f}", "x"),
    ("Fastest dense control", "dense_control", "{}", ""),
    ("Speedup over our B0 (kernel effect)", "speedup_vs_b0", "{:.3f}", "x"),
    ("PSNR, FFmpeg on encoded videos", "psnr_ffmpeg_db", "{:.2f}", " dB"),
    ("PSNR, per frame (mean)", "psnr_frames_db", "{:.2f}", " dB"),
    ("SSIM, per frame (mean)", "ssim_frames", "{:.4f}", ""),
    ("Noise floor: dense vs dense, FFmpeg PSNR", "noise_floor_psnr_db", "{:.2f}", " dB"),
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
    "`dense.mp4`, `sparse.mp4`, `side_by_side.mp4` (dense | sparse | 8x difference), "
    "`psnr_per_frame.png`, `routing_heatmap.png`, `routing_stats.npz`, `metrics.json`, "
    "`config.yaml`."
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


def _gate_section(cfg: EvalConfig, gate_failures: Sequence[str]) -> list[str]:
    """The report's verdict: no thresholds, the failed ones, or a pass with the thresholds."""
    if cfg.gate.min_psnr_db is None and cfg.gate.min_speedup is None:
        return ["No thresholds set."]
    if gate_failures:
        return [f"- FAILED: {f}" for f in gate_failures]
    return [f"Passed (min PSNR {cfg.gate.min_psnr_db} dB, min speedup {cfg.gate.min_speedup})."]


def write_report(
    run_dir: Path, cfg: EvalConfig, metrics: Mapping[str, Any], gate_failures: Sequence[str]
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
        f"# {cfg.model.name} · {cfg.resolution.name} · schedule {cfg.schedule.name}",
        "",
        f"Prompt: “{cfg.prompt}” · seed {cfg.seed} · {cfg.steps} steps ({cfg.sampler}) · "
        f"guidance {cfg.guidance_scale} · dtype {cfg.dtype} · {metrics.get('tokens', 0):,} tokens",
        "",
        *_report_table(metrics),
        "",
        "## Gate",
        "",
        *_gate_section(cfg, gate_failures),
        "",
        "## Files",
        "",
        _REPORT_FILES,
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def summary_lines(metrics: Mapping[str, Any]) -> str:
    """The few lines printed at the end of a run: headline metrics, then the run folder."""

    def cell(key: str) -> str:
        return _headline_cell(metrics, key)

    return (
        f"dense {cell('dense_median_s')} s | sparse {cell('sparse_median_s')} s"
        f" | speedup {cell('speedup')} vs {cell('dense_control')}"
        f" ({cell('speedup_vs_b0')} vs our B0) | PSNR {cell('psnr_ffmpeg_db')} dB"
        f" (noise floor {cell('noise_floor_psnr_db')} dB) | SSIM {cell('ssim_frames')}"
        f" | dense arm {cell('dense_cache')}\n"
        f"run folder: {metrics.get('run_dir')}"
    )
