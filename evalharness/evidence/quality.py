"""Video quality of the sparse arm (and the dense-vs-dense noise floor) against the dense arm.

The gated figure is PSNR on the raw decoded uint8 frames (``psnr_db``), not on encoded files: two
independent lossy encodes add codec noise that can dwarf the attention error (the default job read
37.6 dB through CRF-18 mp4s where its frames differ at 52.6 dB). Beside it: FFmpeg's ``psnr``
filter on the lossless measurement videos (a cross-check by another implementation; they agree to
about 0.01 dB) and the codec noise of the viewable ``dense.mp4`` (:func:`quality_metrics`). With
them, the papers' columns: SSIM, AlexNet LPIPS (``evalharness.evidence.lpips``) and the mean of
per-frame PSNRs (``psnr_frames_db``, Sparse VideoGen's PSNR).
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ffmpeg
import numpy as np
from skimage.metrics import structural_similarity

from evalharness.arms import ArmResult
from evalharness.evidence.lpips import lpips_frames
from evalharness.evidence.video import (
    VideoError,
    _tail,
    decode_mp4,
    ffmpeg_executable,
    viewable_path,
)
from evalharness.metric_names import Metric

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


def ffmpeg_psnr(reference: str | Path, distorted: str | Path) -> FFmpegPSNR:
    """PSNR between two encoded videos with FFmpeg's ``psnr`` filter (on lossy encodes it
    includes both encodes' codec noise).

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
            raise VideoError(f"FFmpeg psnr failed on {reference} vs {distorted}:\n{_tail(err)}")
        match = _AVERAGE.search(err.decode("utf-8", "replace"))
        if not match:
            raise VideoError(f"FFmpeg printed no PSNR summary:\n{_tail(err)}")
        per_frame = [float(m) for m in _FRAME_AVG.findall(stats.read_text())]
    return FFmpegPSNR(float(match.group(1)), np.asarray(per_frame, np.float64))


def _psnr(mse: float) -> float:
    """PSNR in dB of uint8 data (peak 255) from a mean squared error; inf when it is 0."""
    return math.inf if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def _frame_psnr(reference: np.ndarray, distorted: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-frame PSNR [T] and the whole video's (from the mean squared error over all frames) of
    two uint8 [T, H, W, 3] videos, one frame at a time in float64 to bound memory.

    Raises:
        ValueError: the videos differ in shape, or are not [T, H, W, 3].
    """
    if reference.shape != distorted.shape:
        raise ValueError(f"videos differ in shape: {reference.shape} vs {distorted.shape}")
    if reference.ndim != 4 or reference.shape[-1] != 3:
        raise ValueError(f"expected [T, H, W, 3] frames, got {reference.shape}")
    mse = [
        np.mean(np.square(r.astype(np.float64) - d))
        for r, d in zip(reference, distorted, strict=True)
    ]
    return np.asarray([_psnr(m) for m in mse], np.float64), _psnr(float(np.mean(mse)))


@dataclass(frozen=True)
class FrameQuality:
    """Per-frame quality of a distorted video against a reference, on raw uint8 frames.

    Attributes:
        psnr_db: per-frame PSNR [T] (peak 255; inf for an identical frame).
        ssim: per-frame SSIM [T] (channel-wise, averaged over RGB).
        video_psnr_db: PSNR of the whole video from the mean squared error over all frames (what
            FFmpeg's ``average`` is); inf only when every frame is identical.
    """

    psnr_db: np.ndarray
    ssim: np.ndarray
    video_psnr_db: float

    @property
    def mean_psnr_db(self) -> float:
        """Per-frame PSNR averaged over frames (identical frames count as inf)."""
        return float(np.mean(self.psnr_db))

    @property
    def worst_psnr_db(self) -> float:
        """The lowest per-frame PSNR: the frame furthest from the reference."""
        return float(np.min(self.psnr_db))

    @property
    def mean_ssim(self) -> float:
        """Per-frame SSIM averaged over frames."""
        return float(np.mean(self.ssim))


def frame_quality(reference: np.ndarray, distorted: np.ndarray) -> FrameQuality:
    """Per-frame PSNR (NumPy) and SSIM (scikit-image) on raw uint8 frames.

    Args:
        reference: uint8 [T, H, W, 3].
        distorted: uint8 [T, H, W, 3].

    Returns:
        Per-frame curves and the whole-video PSNR.
    """
    reference, distorted = np.asarray(reference), np.asarray(distorted)
    psnr, video_psnr = _frame_psnr(reference, distorted)
    ssim = []
    for ref, dis, frame_psnr in zip(reference, distorted, psnr, strict=True):
        if math.isinf(frame_psnr):  # an identical frame
            ssim.append(1.0)
            continue
        # SSIM's default 7x7 window must fit the frame; tiny test frames use a smaller odd window.
        win = min(7, *(d if d % 2 else d - 1 for d in ref.shape[:2]))
        ssim.append(structural_similarity(ref, dis, data_range=255, channel_axis=-1, win_size=win))
    return FrameQuality(psnr, np.asarray(ssim), video_psnr)


@dataclass(frozen=True)
class CodecNoise:
    """How far an encoded video decodes from the raw frames it was made from.

    Attributes:
        video: the encoded file measured.
        per_frame_db: per-frame PSNR [T] of the decoded frames against the raw ones.
        psnr_db: PSNR from the mean squared error over all frames (inf for a lossless encode).
    """

    video: Path
    per_frame_db: np.ndarray
    psnr_db: float


def codec_noise(video: str | Path, frames: np.ndarray) -> CodecNoise:
    """Decodes ``video`` and measures it against the raw uint8 [T, H, W, 3] ``frames`` it was
    encoded from.

    Raises:
        FileNotFoundError: the file is missing.
        VideoError: FFmpeg could not read it.
        ValueError: the decoded video does not have the frames' shape.
    """
    return CodecNoise(Path(video), *_frame_psnr(np.asarray(frames), decode_mp4(video)))


@dataclass(frozen=True)
class VideoQuality:
    """One arm's output against the reference arm's.

    Attributes:
        encoded: FFmpeg's PSNR of the two measurement videos (lossless: equals ``frames``').
        frames: per-frame PSNR and SSIM of the raw frames (what the gate reads).
        max_abs_latent_diff: largest absolute difference of the final latents.
        codec: the reference arm's viewable video against its own raw frames (codec noise).
        lpips: per-frame AlexNet LPIPS of the raw frames [T] (0 for an identical frame).
    """

    encoded: FFmpegPSNR
    frames: FrameQuality
    max_abs_latent_diff: float
    codec: CodecNoise
    lpips: np.ndarray

    @property
    def mean_lpips(self) -> float:
        """LPIPS averaged over frames, as the papers report it."""
        return float(np.mean(self.lpips))


def measure(
    reference_video: str | Path,
    distorted_video: str | Path,
    reference: ArmResult,
    distorted: ArmResult,
    *,
    codec_video: str | Path | None = None,
    lpips: np.ndarray | None = None,
) -> VideoQuality:
    """Measures an arm against the reference arm (raw frames, lossless videos, codec noise,
    latents, LPIPS).

    Args:
        reference_video: the reference arm's measurement video (``dense.lossless.mkv``).
        distorted_video: the measured arm's measurement video.
        reference: the reference arm's latents and frames.
        distorted: the measured arm's latents and frames.
        codec_video: the encode whose codec noise to report; default: the viewable video next to
            ``reference_video`` (``dense.mp4`` for ``dense.lossless.mkv``) when it exists, else
            ``reference_video`` itself.
        lpips: the per-frame LPIPS [T] when already computed (``lpips_frames`` measures several
            arms against one reference at once); default: computed here.
    """
    if codec_video is None:
        viewable = viewable_path(reference_video)
        codec_video = viewable if viewable is not None and viewable.is_file() else reference_video
    return VideoQuality(
        ffmpeg_psnr(reference_video, distorted_video),
        frame_quality(reference.frames, distorted.frames),
        float(np.max(np.abs(reference.latents - distorted.latents))),
        codec_noise(codec_video, reference.frames),
        lpips_frames(reference.frames, distorted.frames)[0] if lpips is None else lpips,
    )


def gap_to_noise_floor(noise_floor_db: float, sparse_db: float) -> float:
    """``noise_floor_db - sparse_db``: how many dB further the sparse arm is from the dense arm
    than the second dense control is; inf for an exact floor unless the sparse arm is exact too
    (gap 0)."""
    if math.isinf(noise_floor_db) and math.isinf(sparse_db) and noise_floor_db == sparse_db:
        return 0.0
    return float(noise_floor_db - sparse_db)


def quality_metrics(sparse: VideoQuality, noise_floor: VideoQuality | None) -> dict[str, float]:
    """Run metrics of the sparse arm's quality and, when measured, of the dense-vs-dense floor
    (PSNR in dB against the dense arm; inf means identical).

    ``psnr_db`` (gated; equals ``psnr_video_db``) comes from the mean squared error over all
    frames, not the mean of per-frame dB (``psnr_frames_db``), which one identical frame would
    make inf and which is lenient to a few bad frames. Beside it: ``psnr_worst_frame_db``,
    ``ssim_frames`` (mean SSIM), ``psnr_ffmpeg_db`` (the lossless videos through FFmpeg),
    ``codec_psnr_db`` (``dense.mp4`` against the dense frames), ``lpips`` (mean per-frame AlexNet
    LPIPS; lower is better) and ``max_abs_latent_diff``; with a noise floor, ``noise_floor_*`` for
    the second dense control (all but the codec's and ``psnr_video_db``) and
    ``gap_to_noise_floor_db`` (floor minus sparse).

    Args:
        sparse: the sparse arm against the dense arm.
        noise_floor: the second dense executor against the dense arm, or None.
    """
    metrics = {
        Metric.PSNR_DB: sparse.frames.video_psnr_db,
        Metric.PSNR_WORST_FRAME_DB: sparse.frames.worst_psnr_db,
        Metric.PSNR_FRAMES_DB: sparse.frames.mean_psnr_db,
        Metric.PSNR_VIDEO_DB: sparse.frames.video_psnr_db,
        Metric.SSIM_FRAMES: sparse.frames.mean_ssim,
        Metric.LPIPS: sparse.mean_lpips,
        "psnr_ffmpeg_db": sparse.encoded.average_db,
        "codec_psnr_db": sparse.codec.psnr_db,
    }
    if noise_floor is not None:
        floor_db = noise_floor.frames.video_psnr_db
        metrics[Metric.NOISE_FLOOR_PSNR_DB] = floor_db
        metrics["noise_floor_psnr_worst_frame_db"] = noise_floor.frames.worst_psnr_db
        metrics["noise_floor_psnr_frames_db"] = noise_floor.frames.mean_psnr_db
        metrics["noise_floor_ssim_frames"] = noise_floor.frames.mean_ssim
        metrics[Metric.NOISE_FLOOR_LPIPS] = noise_floor.mean_lpips
        metrics["noise_floor_psnr_ffmpeg_db"] = noise_floor.encoded.average_db
        metrics["noise_floor_max_abs_latent_diff"] = noise_floor.max_abs_latent_diff
        metrics[Metric.GAP_TO_NOISE_FLOOR_DB] = gap_to_noise_floor(
            floor_db, metrics[Metric.PSNR_DB]
        )
    metrics["max_abs_latent_diff"] = sparse.max_abs_latent_diff
    return metrics
