"""A run's results in its folder, written by :func:`write_results` once the gate has judged:
``metrics.json`` and ``report.md`` (a suite's with ``pairs.csv``)."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalharness.config import EvalConfig
from evalharness.evidence.run_folder import write_metrics
from evalharness.evidence.statistics import CONFIDENCE, STATISTICS, SUMMARIZED, suite_metrics
from evalharness.formatting import format_cell, markdown_table, markdown_text
from evalharness.metric_names import Metric, RunMetrics, on_random_weights, slower_note

# Per-pair columns of ``pairs.csv`` and the report's pair table: (title, key, format).
PAIR_COLUMNS = (
    ("pair", "pair", "{}"),
    ("seed", "seed", "{}"),
    ("PSNR dB", Metric.PSNR_DB, "{:.2f}"),
    ("worst frame dB", Metric.PSNR_WORST_FRAME_DB, "{:.2f}"),
    ("PSNR frames dB", Metric.PSNR_FRAMES_DB, "{:.2f}"),
    ("SSIM", Metric.SSIM_FRAMES, "{:.4f}"),
    ("LPIPS", Metric.LPIPS, "{:.4f}"),
    ("dense median s", "dense_median_s", "{:.3f}"),
    ("sparse median s", "sparse_median_s", "{:.3f}"),
    (Metric.SPEEDUP, Metric.SPEEDUP, "{:.3f}x"),
    ("vs", "dense_control", "{}"),
    ("gap to floor dB", Metric.GAP_TO_NOISE_FLOOR_DB, "{:.2f}"),
    ("dense arm", "dense_cache", "{}"),
    ("prompt", "prompt", "{}"),
)
# Context metrics shown beside the headline as their mean over pairs.
AVERAGED = (
    Metric.NOISE_FLOOR_PSNR_DB,
    Metric.NOISE_FLOOR_LPIPS,
    Metric.GAP_TO_NOISE_FLOOR_DB,
    "codec_psnr_db",
    "psnr_ffmpeg_db",
)
_TITLES = {
    Metric.PSNR_DB: "PSNR dB",
    Metric.PSNR_WORST_FRAME_DB: "worst-frame PSNR dB",
    Metric.PSNR_FRAMES_DB: "PSNR dB, mean over frames (the papers')",
    Metric.SSIM_FRAMES: "SSIM",
    Metric.LPIPS: "LPIPS (AlexNet; lower is better, worst = largest)",
    Metric.SPEEDUP: Metric.SPEEDUP,
}
# The single-pair report's timing rows: (title, arm label).
_TIMING_ROWS = (
    ("Dense denoising, median (min-max)", "dense"),
    ("Second dense control (noise-floor arm), median (min-max)", "noise_floor"),
    ("Sparse denoising, median (min-max)", "sparse"),
)
# The single-pair report's other rows: (title, metric key, format, unit); the key None marks the
# compile row, which shows two metrics.
_REPORT_ROWS = (
    ("Speedup over the fastest dense control", Metric.SPEEDUP, "{:.3f}", "x"),
    ("Fastest dense control", "dense_control", "{}", ""),
    ("Speedup over our dense arm (kernel effect)", "speedup_vs_dense_arm", "{:.3f}", "x"),
    ("PSNR, raw frames (gated; from the mean MSE)", Metric.PSNR_DB, "{:.2f}", " dB"),
    ("PSNR, worst frame", Metric.PSNR_WORST_FRAME_DB, "{:.2f}", " dB"),
    ("PSNR, per frame (mean of dB; Sparse VideoGen's PSNR)", "psnr_frames_db", "{:.2f}", " dB"),
    ("SSIM, per frame (mean)", Metric.SSIM_FRAMES, "{:.4f}", ""),
    ("LPIPS, AlexNet, per frame (mean; lower is better)", Metric.LPIPS, "{:.4f}", ""),
    ("Noise floor: dense vs dense, raw-frame PSNR", Metric.NOISE_FLOOR_PSNR_DB, "{:.2f}", " dB"),
    ("Noise floor: worst frame", "noise_floor_psnr_worst_frame_db", "{:.2f}", " dB"),
    ("Noise floor: LPIPS", Metric.NOISE_FLOOR_LPIPS, "{:.4f}", ""),
    ("Gap to the noise floor (floor - sparse)", Metric.GAP_TO_NOISE_FLOOR_DB, "{:.2f}", " dB"),
    ("PSNR, FFmpeg on the lossless videos (cross-check)", "psnr_ffmpeg_db", "{:.2f}", " dB"),
    ("Codec noise: dense.mp4 vs its raw frames", "codec_psnr_db", "{:.2f}", " dB"),
    ("Schedule kept fraction (dense steps/layers counted)", "schedule_kept_fraction", "{:.4f}", ""),
    ("Sparse mask density", "mask_density", "{:.4f}", ""),
    ("Heads routed temporal (mean)", "routing_temporal_fraction", "{:.3f}", ""),
    ("Compile dense / sparse", None, "{}", ""),
    ("Text encoding", "text_encode_s", "{:.2f}", " s"),
    ("VAE decode (sparse arm)", "decode_sparse_s", "{:.2f}", " s"),
    ("Dense arm", "dense_cache", "{}", ""),
)
_REPORT_FILES = (
    "`dense.mp4`, `sparse.mp4`, `noise_floor.mp4` (to watch: H.264 yuv420p, lossy), "
    "`side_by_side.mp4` (dense | sparse | 8x difference), `dense.lossless.mkv`, "
    "`sparse.lossless.mkv`, `noise_floor.lossless.mkv` (to measure: FFV1, the exact frames), "
    "`psnr_per_frame.png`, `quality_per_frame.npz`, `routing_heatmap.png`, `routing_stats.npz`, "
    "`metrics.json`, `config.yaml`."
)
_SUITE_FILES = (
    "`pairs.csv`, `metrics.json`, `config.yaml`; each pair's videos, per-frame quality, "
    "routing statistics and `metrics.json` under `pairs/<pair>/`."
)


def parent_metrics(per_pair: Sequence[RunMetrics]) -> RunMetrics:
    """The run's metrics over a suite's pairs: ``psnr_db``, ``ssim_frames`` and ``speedup`` are
    the means over pairs, ``psnr_worst_frame_db`` the worst frame of any pair, the dense and
    sparse medians the median of the pairs', :data:`AVERAGED` their means; every
    ``<metric>_<statistic>`` of ``suite_metrics`` is beside them, and whatever every pair
    measured alike (geometry, densities, executors) is kept as it is.

    Raises:
        ValueError: no pairs.
    """
    out: dict[str, Any] = {
        key: value
        for key, value in per_pair[0].items()
        if all(key in m and _same(m[key], value) for m in per_pair[1:])
    }
    for key in ("prompt", "seed", "pair"):
        out.pop(key, None)
    stats = suite_metrics(per_pair)
    out.update(stats)
    for name in (
        Metric.PSNR_DB,
        Metric.PSNR_FRAMES_DB,
        Metric.SSIM_FRAMES,
        Metric.LPIPS,
        Metric.SPEEDUP,
    ):
        if f"{name}_mean" in stats:
            out[name] = stats[f"{name}_mean"]
    if "psnr_worst_frame_db_worst" in stats:
        out[Metric.PSNR_WORST_FRAME_DB] = stats["psnr_worst_frame_db_worst"]
    for name in ("dense_median_s", "sparse_median_s"):
        if all(name in m for m in per_pair):
            out[name] = statistics.median(float(m[name]) for m in per_pair)
    for name in AVERAGED:
        if all(name in m for m in per_pair):
            out[name] = statistics.fmean(float(m[name]) for m in per_pair)
    out[Metric.DENSE_TIMING_REUSED] = max(
        int(m.get(Metric.DENSE_TIMING_REUSED, 0)) for m in per_pair
    )
    return RunMetrics.of(out)


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


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
            ("max LPIPS", getattr(gate, "max_lpips", None), ""),
            ("min speedup", gate.min_speedup, ""),
        )
        if value is not None
    ]
    if not thresholds:
        return [
            "Not gated: no thresholds set (gate.min_psnr_db, gate.min_worst_frame_psnr_db, "
            "gate.max_lpips, gate.min_speedup)."
        ]
    if gate_failures:
        return [f"- FAILED: {f}" for f in gate_failures]
    return [f"Passed ({', '.join(thresholds)})."]


def _write_report(
    run_dir: Path,
    cfg: EvalConfig,
    title: str,
    body: list[str],
    gate_heading: str,
    gate_failures: Sequence[str],
    files: str,
) -> Path:
    """``report.md``: the title line (ending in ``title``), ``body``, the gate's section and the
    files."""
    lines = [
        f"# {cfg.model.name} · {cfg.resolution.name} · schedule {markdown_text(cfg.schedule.name)}"
        f"{title}",
        "",
        *body,
        "",
        gate_heading,
        "",
        *gate_section(cfg, gate_failures),
        "",
        "## Files",
        "",
        files,
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _reader_notes(cfg: EvalConfig, metrics: Mapping[str, Any]) -> list[str]:
    """A run on random weights says first that its quality figures mean nothing; a run whose
    sparse arm was slower than dense says so plainly."""
    slower = slower_note(metrics)
    notes = [f"**Slower than dense**: {slower}.", ""] if slower else []
    if not on_random_weights(metrics):
        return notes
    return [
        *notes,
        f"**Random weights** (`model.checkpoint=random`, `model.seed={cfg.model.seed}`): the "
        "timings and speedups are real; the quality figures (PSNR, SSIM, the noise floor) are "
        "meaningless: they compare videos drawn by random weights. The gate refuses quality "
        "thresholds on such a run.",
        "",
    ]


def _settings(cfg: EvalConfig, metrics: Mapping[str, Any]) -> str:
    return (
        f"{cfg.steps} steps ({cfg.sampler}) · guidance {cfg.guidance_scale} · dtype {cfg.dtype} · "
        f"{metrics.get('tokens', 0):,} tokens"
    )


def write_report(
    run_dir: Path, cfg: EvalConfig, metrics: RunMetrics, gate_failures: Sequence[str]
) -> Path:
    """Writes a single pair's ``report.md`` (the comparison in one table, then the verdict) and
    returns its path.

    Args:
        run_dir: the run folder.
        cfg: the run's configuration (title, prompt line, gate thresholds).
        metrics: the run's metrics.
        gate_failures: one line per missed gate threshold (empty when the gate passed).
    """
    rows = []
    for title, arm in _TIMING_ROWS:
        median, low, high = (
            format_cell(metrics.get(f"{arm}_{s}_s"), "{:.3f}") for s in ("median", "min", "max")
        )
        rows.append({"metric": title, "value": f"{median} s ({low}-{high})"})
    for title, key, fmt, unit in _REPORT_ROWS:
        if key is None:
            compile_dense = format_cell(metrics.get("compile_dense_s"), "{:.2f}")
            compile_sparse = format_cell(metrics.get("compile_sparse_s"), "{:.2f}")
            value = f"{compile_dense} s / {compile_sparse} s"
        else:
            shown = metrics.get(key)
            value = f"{format_cell(shown, fmt)}{unit if shown is not None else ''}"
        rows.append({"metric": title, "value": value})
    table = markdown_table(rows, (("metric", "metric", "{}"), ("value", "value", "{}")))
    prompt = f"Prompt: “{markdown_text(cfg.prompt)}” · seed {cfg.seed} · {_settings(cfg, metrics)}"
    body = [*_reader_notes(cfg, metrics), prompt, "", *table.splitlines()]
    return _write_report(run_dir, cfg, "", body, "## Gate", gate_failures, _REPORT_FILES)


def summary_table(metrics: RunMetrics) -> str:
    """The statistics across pairs as a Markdown table, one row per summarized metric."""
    rows = []
    for name in SUMMARIZED:
        if f"{name}_mean" not in metrics:
            continue
        fmt = "{:.4f}" if name in (Metric.SSIM_FRAMES, Metric.LPIPS) else "{:.3f}"
        cells = {stat: format_cell(metrics.get(f"{name}_{stat}"), fmt) for stat in STATISTICS}
        rows.append({**cells, "metric": _TITLES[name], "ci": f"{cells['lcb']} - {cells['ucb']}"})
    columns = [
        ("metric", "metric", "{}"),
        ("mean", "mean", "{}"),
        ("std", "std", "{}"),
        ("worst pair", "worst", "{}"),
        (f"{CONFIDENCE:.0%} bootstrap CI of the mean", "ci", "{}"),
    ]
    return markdown_table(rows, columns)


def write_suite_report(
    run_dir: Path,
    cfg: EvalConfig,
    metrics: RunMetrics,
    per_pair: Sequence[RunMetrics],
    gate_failures: Sequence[str],
) -> Path:
    """Writes ``pairs.csv`` (one row per pair, the columns of :data:`PAIR_COLUMNS`) and
    ``report.md`` (the statistics across pairs, each pair, the gate); returns the report's path.

    Args:
        run_dir: the run folder (each pair's own files are under ``pairs/<pair>/``).
        cfg: the run's configuration.
        metrics: the run's metrics (:func:`parent_metrics` and run-level ones).
        per_pair: each pair's metrics, in pair order.
        gate_failures: one line per missed gate threshold.
    """
    with (run_dir / "pairs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([key for _, key, _ in PAIR_COLUMNS])
        for pair in per_pair:
            writer.writerow([pair.get(key, "") for _, key, _ in PAIR_COLUMNS])
    seeds = sorted({m["seed"] for m in per_pair})
    prompts = len({m["prompt"] for m in per_pair})
    body = [
        *_reader_notes(cfg, metrics),
        f"Suite: {prompts} prompts (prompts={markdown_text(cfg.prompts or 'prompt')}) × seeds "
        f"{seeds} · {_settings(cfg, metrics)}. Each pair's arms were timed side by side, "
        "round-robin, on loops compiled once for the whole suite.",
        "",
        "## Across pairs",
        "",
        summary_table(metrics),
        "",
        "## Pairs",
        "",
        # A prompt is shown literally: its markup and line breaks escaped.
        markdown_table(per_pair, PAIR_COLUMNS, escape=True),
    ]
    gate = f"## Gate (on the {cfg.gate.on.value} across pairs)"
    title = f" · {len(per_pair)} pairs"
    return _write_report(run_dir, cfg, title, body, gate, gate_failures, _SUITE_FILES)


def write_results(
    run_dir: Path,
    cfg: EvalConfig,
    metrics: RunMetrics,
    per_pair: Sequence[RunMetrics],
    gate_failures: Sequence[str],
) -> None:
    """Writes ``metrics.json`` and the report: one pair's (:func:`write_report`), or a suite's
    with ``pairs.csv`` (:func:`write_suite_report`).

    Args:
        run_dir: the run folder.
        cfg: the run's configuration.
        metrics: the run's metrics, the gate's verdict among them.
        per_pair: each pair's metrics, in pair order (one for a single pair).
        gate_failures: one line per missed gate threshold.
    """
    write_metrics(run_dir, metrics)
    if len(per_pair) == 1:
        write_report(run_dir, cfg, metrics, gate_failures)
    else:
        write_suite_report(run_dir, cfg, metrics, per_pair, gate_failures)
