"""Run-folder artifacts: metrics.json, report.md, the per-frame PSNR plot, the console summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402

from evalharness.formatting import format_cell  # noqa: E402
from evalharness.quality import FFmpegPSNR, FrameQuality  # noqa: E402


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


_REPORT_ROWS = (
    ("Dense denoising, median (min-max)", "dense", "s"),
    ("Sparse denoising, median (min-max)", "sparse", "s"),
)


def write_report(run_dir: Path, cfg, metrics: dict[str, Any], gate_failures) -> Path:
    """Writes ``report.md``: the comparison in one table, then the settings and the verdict."""
    m = metrics
    lines = [
        f"# {cfg.model.name} · {cfg.resolution.name} · schedule {cfg.schedule.name}",
        "",
        f"Prompt: “{cfg.prompt}” · seed {cfg.seed} · {cfg.steps} steps ({cfg.sampler}) · "
        f"guidance {cfg.guidance_scale} · dtype {cfg.dtype} · {m.get('tokens', 0):,} tokens",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    for title, arm, _ in _REPORT_ROWS:
        lines.append(
            f"| {title} | {format_cell(m.get(f'{arm}_median_s'), '{:.3f}')} s "
            f"({format_cell(m.get(f'{arm}_min_s'), '{:.3f}')}-{format_cell(m.get(f'{arm}_max_s'), '{:.3f}')}) |"
        )
    rows = (
        ("Speedup (dense / sparse median)", "speedup", "{:.3f}", "x"),
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
    for title, key, spec, unit in rows:
        if key is None:
            value = f"{format_cell(m.get('compile_dense_s'), '{:.2f}')} s / {format_cell(m.get('compile_sparse_s'), '{:.2f}')} s"
        else:
            value = f"{format_cell(m.get(key), spec)}{unit if m.get(key) is not None else ''}"
        lines.append(f"| {title} | {value} |")
    lines += ["", "## Gate", ""]
    if cfg.gate.min_psnr_db is None and cfg.gate.min_speedup is None:
        lines.append("No thresholds set.")
    elif gate_failures:
        lines += [f"- FAILED: {f}" for f in gate_failures]
    else:
        lines.append(
            f"Passed (min PSNR {cfg.gate.min_psnr_db} dB, min speedup {cfg.gate.min_speedup})."
        )
    lines += [
        "",
        "## Files",
        "",
        "`dense.mp4`, `sparse.mp4`, `side_by_side.mp4` (dense | sparse | 8x difference), "
        "`psnr_per_frame.png`, `routing_heatmap.png`, `routing_stats.npz`, `metrics.json`, "
        "`config.yaml`.",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def summary_lines(metrics: dict[str, Any]) -> str:
    """The few lines printed at the end of a run."""
    m = metrics
    return (
        f"dense {format_cell(m.get('dense_median_s'), '{:.3f}')} s | sparse {format_cell(m.get('sparse_median_s'), '{:.3f}')} s"
        f" | speedup {format_cell(m.get('speedup'), '{:.3f}')}x | PSNR {format_cell(m.get('psnr_ffmpeg_db'), '{:.2f}')} dB"
        f" (noise floor {format_cell(m.get('noise_floor_psnr_db'), '{:.2f}')} dB) | SSIM "
        f"{format_cell(m.get('ssim_frames'), '{:.4f}')} | dense arm {m.get('dense_cache')}\n"
        f"run folder: {m.get('run_dir')}"
    )
