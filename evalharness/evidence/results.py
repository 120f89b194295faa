"""A run's results in its folder: ``metrics.json`` and ``report.md`` (a suite's with ``pairs.csv``).

:func:`write_results` is the one call that writes them once the gate has judged. For a prompt
suite, :func:`parent_metrics` gives the run's metrics across pairs. The run's headline metrics
are then the suite's: ``psnr_db``, ``ssim_frames`` and ``speedup`` are the
means over pairs, ``psnr_worst_frame_db`` the worst frame of any pair, ``dense_median_s`` and
``sparse_median_s`` the median of the pairs' medians, the noise floor, the gap to it and the
codec metrics (:data:`AVERAGED`) their means; every ``<metric>_<statistic>`` of
:func:`evalharness.evidence.statistics.suite_metrics` is beside them, and whatever every pair measured alike
(geometry, densities, executors) is kept as it is.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalharness.config import EvalConfig
from evalharness.evidence import run_folder
from evalharness.evidence.run_folder import gate_section
from evalharness.evidence.statistics import CONFIDENCE, SUMMARIZED, suite_metrics
from evalharness.formatting import format_cell, markdown_table, markdown_text
from evalharness.metric_names import Metric, RunMetrics

# Per-pair columns of ``pairs.csv`` and the report's pair table: (title, key, format).
PAIR_COLUMNS = (
    ("pair", "pair", "{}"),
    ("seed", "seed", "{}"),
    ("PSNR dB", Metric.PSNR_DB, "{:.2f}"),
    ("worst frame dB", Metric.PSNR_WORST_FRAME_DB, "{:.2f}"),
    ("SSIM", Metric.SSIM_FRAMES, "{:.4f}"),
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
    Metric.GAP_TO_NOISE_FLOOR_DB,
    "codec_psnr_db",
    "psnr_ffmpeg_db",
)
_TITLES = {
    Metric.PSNR_DB: "PSNR dB",
    Metric.PSNR_WORST_FRAME_DB: "worst-frame PSNR dB",
    Metric.SSIM_FRAMES: "SSIM",
    Metric.SPEEDUP: Metric.SPEEDUP,
}


def parent_metrics(per_pair: Sequence[RunMetrics]) -> RunMetrics:
    """The run's metrics over a suite's pairs (see the module docstring).

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
    for name in (Metric.PSNR_DB, Metric.SSIM_FRAMES, Metric.SPEEDUP):
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


def write_pairs_csv(run_dir: Path, per_pair: Sequence[RunMetrics]) -> Path:
    """``pairs.csv``: one row per pair with the columns of :data:`PAIR_COLUMNS`."""
    path = run_dir / "pairs.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([key for _, key, _ in PAIR_COLUMNS])
        for metrics in per_pair:
            writer.writerow([metrics.get(key, "") for _, key, _ in PAIR_COLUMNS])
    return path


def summary_table(metrics: RunMetrics) -> str:
    """The statistics across pairs as a Markdown table, one row per summarized metric."""
    rows = []
    level = f"{CONFIDENCE:.0%}"
    for name in SUMMARIZED:
        if f"{name}_mean" not in metrics:
            continue
        fmt = "{:.4f}" if name == Metric.SSIM_FRAMES else "{:.3f}"
        cell = lambda stat, n=name, f=fmt: format_cell(metrics.get(f"{n}_{stat}"), f)  # noqa: E731
        rows.append(
            {
                "metric": _TITLES[name],
                "mean": cell("mean"),
                "std": cell("std"),
                "worst": cell("worst"),
                "ci": f"{cell('lcb')} - {cell('ucb')}",
            }
        )
    columns = [
        ("metric", "metric", "{}"),
        ("mean", "mean", "{}"),
        ("std", "std", "{}"),
        ("worst pair", "worst", "{}"),
        (f"{level} bootstrap CI of the mean", "ci", "{}"),
    ]
    return markdown_table(rows, columns)


def write_suite_report(
    run_dir: Path,
    cfg: EvalConfig,
    metrics: RunMetrics,
    per_pair: Sequence[RunMetrics],
    gate_failures: Sequence[str],
) -> Path:
    """Writes ``pairs.csv`` and ``report.md``: the statistics across pairs, each pair, the gate.

    Args:
        run_dir: the run folder (each pair's own files are under ``pairs/<pair>/``).
        cfg: the run's configuration.
        metrics: the run's metrics (:func:`parent_metrics` and run-level ones).
        per_pair: each pair's metrics, in pair order.
        gate_failures: one line per missed gate threshold.

    Returns:
        The report's path.
    """
    write_pairs_csv(run_dir, per_pair)
    seeds = sorted({m["seed"] for m in per_pair})
    prompts = len({m["prompt"] for m in per_pair})
    lines = [
        f"# {cfg.model.name} · {cfg.resolution.name} · schedule {markdown_text(cfg.schedule.name)} · "
        f"{len(per_pair)} pairs",
        "",
        f"Suite: {prompts} prompts (prompts={markdown_text(cfg.prompts or 'prompt')}) × seeds "
        f"{seeds} · "
        f"{cfg.steps} steps ({cfg.sampler}) · guidance {cfg.guidance_scale} · dtype {cfg.dtype} · "
        f"{metrics.get('tokens', 0):,} tokens. Each pair's arms were timed side by side, "
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
        "",
        f"## Gate (on the {cfg.gate.on.value} across pairs)",
        "",
        *gate_section(cfg, gate_failures),
        "",
        "## Files",
        "",
        "`pairs.csv`, `metrics.json`, `config.yaml`; each pair's videos, per-frame quality, "
        "routing statistics and `metrics.json` under `pairs/<pair>/`.",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_results(
    run_dir: Path,
    cfg: EvalConfig,
    metrics: RunMetrics,
    per_pair: Sequence[RunMetrics],
    gate_failures: Sequence[str],
) -> None:
    """Writes ``metrics.json`` and the report: one pair's (:func:`run_folder.write_report`), or
    a suite's with ``pairs.csv`` (:func:`write_suite_report`).

    Args:
        run_dir: the run folder.
        cfg: the run's configuration.
        metrics: the run's metrics, the gate's verdict among them.
        per_pair: each pair's metrics, in pair order (one for a single pair).
        gate_failures: one line per missed gate threshold.
    """
    run_folder.write_metrics(run_dir, metrics)
    if len(per_pair) == 1:
        run_folder.write_report(run_dir, cfg, metrics, gate_failures)
    else:
        write_suite_report(run_dir, cfg, metrics, per_pair, gate_failures)
