"""Video quality: FFmpeg's ``psnr`` filter on encoded files, per-frame PSNR/SSIM on raw frames."""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import ffmpeg
import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from evalharness.video import VideoError, _tail, ffmpeg_executable


class ArmOutput(Protocol):
    """What quality reads from an arm (``evalharness.arms.ArmResult`` fits)."""

    latents: np.ndarray
    frames: np.ndarray


_AVERAGE = re.compile(r"PSNR .*average:(inf|[-\d.]+)")
_FRAME_AVG = re.compile(r"psnr_avg:(inf|[-\d.]+)")


@dataclass(frozen=True)
class FFmpegPSNR:
    """FFmpeg ``psnr`` filter result.

    Attributes:
        average_db: the filter's overall ``average`` (from the mean MSE over frames and planes).
        per_frame_db: per-frame ``psnr_avg`` values [T].
    """

    average_db: float
    per_frame_db: np.ndarray


def _to_float(text: str) -> float:
    return math.inf if text == "inf" else float(text)


def ffmpeg_psnr(reference: str | Path, distorted: str | Path) -> FFmpegPSNR:
    """PSNR between two encoded videos with FFmpeg's ``psnr`` filter (the headline quality figure).

    Args:
        reference: the dense video file.
        distorted: the sparse video file (same size and frame count).

    Returns:
        The overall and per-frame PSNR in dB (``inf`` for identical videos).

    Raises:
        FileNotFoundError: a file is missing.
        VideoError: FFmpeg failed, e.g. because the sizes differ.
    """
    for p in (reference, distorted):
        if not Path(p).is_file():
            raise FileNotFoundError(f"no video at {p}")
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "psnr.log"
        main = ffmpeg.input(str(Path(distorted).resolve()))
        ref = ffmpeg.input(str(Path(reference).resolve()))
        # psnr's filter-graph escaping is fragile; a relative name in cwd=tmp avoids it.
        graph = ffmpeg.filter([main, ref], "psnr", stats_file="psnr.log")
        args = (
            ffmpeg.output(graph, "-", format="null")
            .global_args("-nostdin", "-nostats")
            .compile(cmd=ffmpeg_executable())
        )
        proc = subprocess.run(args, cwd=tmp, capture_output=True, check=False)
        err = proc.stderr
        if proc.returncode != 0:
            msg = f"FFmpeg psnr failed on {reference} vs {distorted}:\n{_tail(err)}"
            raise VideoError(msg)
        text = err.decode("utf-8", "replace")
        match = _AVERAGE.search(text)
        if not match:
            raise VideoError(f"FFmpeg printed no PSNR summary:\n{_tail(err)}")
        per_frame = [_to_float(m) for m in _FRAME_AVG.findall(stats.read_text())]
    return FFmpegPSNR(_to_float(match.group(1)), np.asarray(per_frame, np.float64))


@dataclass(frozen=True)
class FrameQuality:
    """Per-frame quality of a distorted video against a reference.

    Attributes:
        psnr_db: per-frame PSNR [T] on [0, 1] RGB (data range 255 on uint8).
        ssim: per-frame SSIM [T] (channel-wise, averaged over RGB).
        video_psnr_db: PSNR of the whole video from its mean squared error.
    """

    psnr_db: np.ndarray
    ssim: np.ndarray
    video_psnr_db: float

    @property
    def mean_psnr_db(self) -> float:
        """Per-frame PSNR averaged over frames (identical frames count as inf)."""
        return float(np.mean(self.psnr_db))

    @property
    def mean_ssim(self) -> float:
        """Per-frame SSIM averaged over frames."""
        return float(np.mean(self.ssim))


def frame_quality(reference: np.ndarray, distorted: np.ndarray) -> FrameQuality:
    """Per-frame PSNR and SSIM with scikit-image on raw uint8 frames.

    Args:
        reference: uint8 [T, H, W, 3].
        distorted: uint8 [T, H, W, 3].

    Returns:
        Per-frame curves and the whole-video PSNR.
    """
    reference = np.asarray(reference)
    distorted = np.asarray(distorted)
    if reference.shape != distorted.shape:
        raise ValueError(f"videos differ in shape: {reference.shape} vs {distorted.shape}")
    if reference.ndim != 4 or reference.shape[-1] != 3:
        raise ValueError(f"expected [T, H, W, 3] frames, got {reference.shape}")
    psnr, ssim = [], []
    for ref, dis in zip(reference, distorted, strict=True):
        if np.array_equal(ref, dis):
            psnr.append(math.inf)
            ssim.append(1.0)
            continue
        psnr.append(peak_signal_noise_ratio(ref, dis, data_range=255))
        # SSIM's default 7x7 window must fit the frame; tiny test frames use a smaller odd window.
        win = min(7, *(d if d % 2 else d - 1 for d in ref.shape[:2]))
        ssim.append(structural_similarity(ref, dis, data_range=255, channel_axis=-1, win_size=win))
    if np.array_equal(reference, distorted):
        whole = math.inf
    else:
        whole = float(peak_signal_noise_ratio(reference, distorted, data_range=255))
    return FrameQuality(np.asarray(psnr), np.asarray(ssim), whole)


@dataclass(frozen=True)
class VideoQuality:
    """One arm's output against the reference arm's, measured three ways.

    Attributes:
        encoded: FFmpeg's PSNR of the encoded videos (the headline figure).
        frames: per-frame PSNR and SSIM of the raw frames.
        max_abs_latent_diff: largest absolute difference of the final latents.
    """

    encoded: FFmpegPSNR
    frames: FrameQuality
    max_abs_latent_diff: float


def measure(
    reference_video: str | Path,
    distorted_video: str | Path,
    reference: ArmOutput,
    distorted: ArmOutput,
) -> VideoQuality:
    """Measures an arm against the reference arm.

    Args:
        reference_video: the reference arm's encoded video.
        distorted_video: the measured arm's encoded video.
        reference: the reference arm's latents and frames.
        distorted: the measured arm's latents and frames.
    """
    return VideoQuality(
        ffmpeg_psnr(reference_video, distorted_video),
        frame_quality(reference.frames, distorted.frames),
        float(np.max(np.abs(reference.latents - distorted.latents))),
    )


def quality_metrics(sparse: VideoQuality, noise_floor: VideoQuality | None) -> dict[str, float]:
    """Run metrics of the sparse arm's quality and, when measured, of the dense-vs-dense floor.

    Args:
        sparse: the sparse arm against the dense arm.
        noise_floor: the second dense executor against the dense arm, or None.
    """
    metrics = {
        "psnr_ffmpeg_db": sparse.encoded.average_db,
        "psnr_frames_db": sparse.frames.mean_psnr_db,
        "psnr_video_db": sparse.frames.video_psnr_db,
        "ssim_frames": sparse.frames.mean_ssim,
    }
    if noise_floor is not None:
        metrics["noise_floor_psnr_db"] = noise_floor.encoded.average_db
        metrics["noise_floor_psnr_frames_db"] = noise_floor.frames.mean_psnr_db
        metrics["noise_floor_ssim_frames"] = noise_floor.frames.mean_ssim
        metrics["noise_floor_max_abs_latent_diff"] = noise_floor.max_abs_latent_diff
    metrics["max_abs_latent_diff"] = sparse.max_abs_latent_diff
    return metrics
