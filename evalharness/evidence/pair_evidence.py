"""One pair's evidence: its arms' videos encoded and measured against the dense arm, then the
files beside them (side-by-side video, per-frame quality, routing statistics, timings, latents).

``evalharness.comparison.pair.compare_pair`` calls :func:`measure_videos` once the sparse arm is
decoded, and :func:`write_pair_files` once the pair's metrics are known; the tracker's curves
are logged there, from the same values.
"""

from __future__ import annotations

from pathlib import Path

from evalharness.arms import ArmResult
from evalharness.config import EvalConfig
from evalharness.evidence import run_folder
from evalharness.evidence.dense_cache import DenseArms
from evalharness.evidence.quality import VideoQuality, measure, quality_metrics
from evalharness.evidence.routing_plots import save_routing_stats
from kernels.policy.routing_stats import RoutingStats


def measure_videos(
    folder: Path, dense: DenseArms, sparse: ArmResult, cfg: EvalConfig
) -> tuple[VideoQuality, dict[str, float]]:
    """Encodes every arm's videos into ``folder`` and measures the sparse arm (and the noise
    floor) against the dense arm, from the lossless files and the raw frames.

    Returns:
        The sparse arm's measurement (its per-frame curves) and the quality metrics.
    """
    videos = run_folder.write_arm_videos(folder, dense.dense, sparse, dense.noise_floor, cfg)
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


def write_pair_files(
    folder: Path,
    cfg: EvalConfig,
    dense: DenseArms,
    sparse: ArmResult,
    quality: VideoQuality,
    stats: RoutingStats | None,
    schedule: str,
) -> None:
    """``side_by_side.mp4``, the per-frame quality plot and arrays, the routing statistics (when
    recorded, titled with ``schedule``), ``timings.json`` and, with ``save_latents``,
    ``latents.npz``."""
    run_folder.write_side_by_side(folder, dense.dense, sparse, cfg)
    run_folder.write_frame_quality(folder, quality)
    if stats is not None:
        save_routing_stats(stats, folder, schedule)
    run_folder.write_timings(folder, dense.dense, sparse)
    if cfg.save_latents:
        latents = {"dense": dense.dense, "sparse": sparse, "noise_floor": dense.noise_floor}
        run_folder.write_latents(folder, latents)
