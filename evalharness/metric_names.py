"""The names of a run's headline metrics, as ``metrics.json``, MLflow, the gate, the search and the
reports spell them: one definition each.

``Metric`` members are strings (``Metric.SPEEDUP == "speedup"``), so they index the metrics
mappings and name MLflow metrics as they are.
"""

from __future__ import annotations

import enum


class Metric(enum.StrEnum):
    """A headline metric of a run.

    Members:
        SPEEDUP: the fastest dense control's median loop time over the sparse arm's.
        PSNR_DB: sparse vs dense PSNR on raw frames, from the mean squared error over the video.
        PSNR_WORST_FRAME_DB: the lowest per-frame PSNR.
        SSIM_FRAMES: mean per-frame SSIM.
        NOISE_FLOOR_PSNR_DB: PSNR between the two dense controls (the measured noise floor).
        GAP_TO_NOISE_FLOOR_DB: noise floor minus ``PSNR_DB``.
        DENSE_TIMING_REUSED: 1 when the dense timing came from another run of a sweep (then no
            speedup is gated).
        PSNR_VIDEO_DB: the name ``PSNR_DB`` had in older runs (the same figure); read, never
            written.
    """

    SPEEDUP = "speedup"
    PSNR_DB = "psnr_db"
    PSNR_WORST_FRAME_DB = "psnr_worst_frame_db"
    SSIM_FRAMES = "ssim_frames"
    NOISE_FLOOR_PSNR_DB = "noise_floor_psnr_db"
    GAP_TO_NOISE_FLOOR_DB = "gap_to_noise_floor_db"
    DENSE_TIMING_REUSED = "dense_timing_reused"
    PSNR_VIDEO_DB = "psnr_video_db"
