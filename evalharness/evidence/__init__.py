"""What a comparison leaves behind: quality against the dense arm, video files, the dense-arm
cache and its key, the run folder's files and its results (metrics, report), routing plots, and
statistics across pairs (PSNR, SSIM, LPIPS).
"""

from evalharness.evidence import run_folder, run_status, video
from evalharness.evidence.cache_key import code_version, dense_arm_key
from evalharness.evidence.dense_cache import ArmCache, DenseArms, load_dense_arms, store_dense_arms
from evalharness.evidence.lpips import lpips_frames
from evalharness.evidence.quality import VideoQuality, frame_quality, measure
from evalharness.evidence.results import parent_metrics, write_results
from evalharness.evidence.run_folder import (
    headline_columns,
    headline_row,
    measure_videos,
    write_pair_files,
)
from evalharness.evidence.statistics import LOWER_IS_BETTER, statistic_name, suite_metrics

__all__ = [
    "LOWER_IS_BETTER",
    "ArmCache",
    "DenseArms",
    "VideoQuality",
    "code_version",
    "dense_arm_key",
    "frame_quality",
    "headline_columns",
    "headline_row",
    "load_dense_arms",
    "lpips_frames",
    "measure",
    "measure_videos",
    "parent_metrics",
    "run_folder",
    "run_status",
    "statistic_name",
    "store_dense_arms",
    "suite_metrics",
    "video",
    "write_pair_files",
    "write_results",
]
