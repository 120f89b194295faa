"""The gate's settings (``gate.*``): thresholds that turn a run into a CI exit code, the statistic
of a prompt suite they read, and the PSNR convention ``gate.min_psnr_db`` reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GateOn(enum.StrEnum):
    """Which statistic of a prompt suite the gate reads: the mean over (prompt, seed) pairs, the
    pessimistic end of its 95% bootstrap confidence interval (the lower bound; LPIPS' upper), or
    the worst pair."""

    mean = "mean"
    lcb = "lcb"
    worst = "worst"


class GatePSNR(enum.StrEnum):
    """The PSNR ``gate.min_psnr_db`` reads: ``video``, from the mean squared error over the whole
    video (``psnr_db``, the headline), or ``frames``, the mean of per-frame PSNRs
    (``psnr_frames_db``, Sparse VideoGen's convention)."""

    video = "video"
    frames = "frames"


@dataclass
class GateConfig:
    """Thresholds that turn a run into a CI exit code; None disables a check.

    Attributes:
        min_psnr_db: lowest raw-frame PSNR of sparse vs dense, in the convention ``psnr`` names
            (``psnr_db`` by default: from the mean squared error over all frames; the codec
            plays no part).
        min_worst_frame_psnr_db: lowest PSNR of the worst single frame (``psnr_worst_frame_db``).
        max_lpips: highest mean per-frame AlexNet LPIPS of sparse vs dense (``lpips``).
        min_speedup: lowest headline speedup (against the faster dense control, timed
            interleaved with the sparse arm in the same process).
        on: over a prompt suite, the statistic each threshold is compared with: ``mean``,
            ``lcb`` (the pessimistic end of the 95% bootstrap interval: ``<metric>_lcb``, and
            ``lpips_ucb`` for LPIPS) or ``worst`` (the worst pair). One pair: all three are that
            pair's value.
        psnr: ``video`` (``psnr_db``) or ``frames`` (``psnr_frames_db``).
    """

    min_psnr_db: float | None = None
    min_worst_frame_psnr_db: float | None = None
    max_lpips: float | None = None
    min_speedup: float | None = None
    on: GateOn = GateOn.mean
    psnr: GatePSNR = GatePSNR.video
