"""Video files: encode uint8 frames with FFmpeg, read them back, build comparisons.

Two kinds of file per arm: ``<label>.mp4``, the viewable video (H.264 CRF 18 yuv420p, whose
chroma subsampling and quantisation add codec noise: for eyes, not metrics), and
``<label>.lossless.mkv``, the measurement video (FFV1 on planar RGB, the exact frames; FFV1 is
FFmpeg's own codec, so any build has it, unlike the GPL-only libx264rgb).

FFmpeg is the binary that ``imageio-ffmpeg`` ships; the ``EVALHARNESS_FFMPEG`` environment
variable names another.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import ffmpeg
import imageio_ffmpeg
import numpy as np

# The measurement video of ``<label>.mp4`` is ``<label>.lossless.mkv`` in the same folder.
LOSSLESS_SUFFIX = ".lossless.mkv"
# Each FFmpeg call of the preflight's probe (two frames of 16 x 16) takes well under a second; one
# that has not finished in this long is stuck (a wrapper that waits, a hung binary).
PROBE_TIMEOUT_S = 30.0


class VideoError(RuntimeError):
    """An FFmpeg invocation failed; the message carries FFmpeg's own last lines."""


def ffmpeg_executable() -> str:
    """Path of the FFmpeg binary used for every encode, decode and metric."""
    return os.environ.get("EVALHARNESS_FFMPEG") or imageio_ffmpeg.get_ffmpeg_exe()


def check_encoder() -> str:
    """Proves, before any work, that FFmpeg is there and writes every file a run writes.

    A tiny encode of each kind (the viewable H.264 mp4 and the lossless FFV1 mkv) and a decode of
    the lossless one, which must give the frames back exactly, in a temporary folder; once per
    executable and process (a search's trials share the proof).

    Returns:
        The FFmpeg executable that passed.

    Raises:
        VideoError: no FFmpeg, or one that cannot write or read these formats; the message names
            the fix (``EVALHARNESS_FFMPEG``, or reinstalling ``imageio-ffmpeg``).
    """
    try:
        executable = ffmpeg_executable()
    except RuntimeError as err:  # imageio-ffmpeg found no binary
        raise VideoError(f"no FFmpeg executable ({err}); {_ENCODER_FIX}") from err
    return _prove_encoder(executable)


_ENCODER_FIX = (
    "reinstall imageio-ffmpeg (its wheel ships FFmpeg: pip install --force-reinstall "
    "imageio-ffmpeg), or set EVALHARNESS_FFMPEG to an FFmpeg with libx264 and ffv1"
)


@functools.cache  # a refusal raises and is not cached: a fixed FFmpeg is proven afresh
def _prove_encoder(executable: str) -> str:
    """``check_encoder``'s tiny encodes and read-back with ``executable``; returns it."""
    frames = np.arange(2 * 16 * 16 * 3, dtype=np.uint8).reshape(2, 16, 16, 3)
    bound = {"timeout_s": PROBE_TIMEOUT_S}
    try:
        with tempfile.TemporaryDirectory(prefix="evalharness-ffmpeg-") as folder:
            encode_mp4(frames, Path(folder) / "probe.mp4", **bound)
            lossless = encode_lossless(frames, Path(folder) / f"probe{LOSSLESS_SUFFIX}", **bound)
            read_back = decode_mp4(lossless, **bound)
    except (OSError, VideoError) as err:
        first = str(err).splitlines()[0]
        raise VideoError(
            f"FFmpeg at {executable} cannot encode this run's videos ({first}); {_ENCODER_FIX}"
        ) from err
    if not np.array_equal(read_back, frames):
        raise VideoError(
            f"FFmpeg at {executable} does not give lossless FFV1 frames back exactly; "
            f"{_ENCODER_FIX}"
        )
    return executable


def _tail(stderr: bytes | None, lines: int = 8) -> str:
    text = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return "\n".join(text[-lines:])


def _run(
    stream: Any, data: bytes | None = None, timeout_s: float | None = None
) -> tuple[bytes, bytes]:
    """Runs an ``ffmpeg-python`` stream with this project's FFmpeg, ``data`` on its stdin;
    returns its stdout and stderr. With ``timeout_s`` FFmpeg runs in a session of its own, so
    that it and any process it started (a wrapper script's) are killed when it is over time.

    Raises:
        ffmpeg.Error: FFmpeg exited with an error.
        VideoError: it ran longer than ``timeout_s``.
    """
    args = stream.compile(cmd=ffmpeg_executable())
    pipe = subprocess.PIPE
    process = subprocess.Popen(
        args, stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=timeout_s is not None
    )
    try:
        out, err = process.communicate(data, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise VideoError(
            f"FFmpeg ({args[0]}) did not finish a two-frame probe within {timeout_s:g} s"
        ) from None
    except BaseException:
        process.kill()
        process.wait()
        raise
    if process.returncode:
        raise ffmpeg.Error("ffmpeg", out, err)
    return out, err


def _encode(
    frames: np.ndarray, path: Path, fps: int, timeout_s: float | None = None, **out_args: Any
) -> Path:
    """Pipes uint8 [T, H, W, 3] RGB frames (checked first) into FFmpeg, writing ``path``
    (within ``timeout_s`` when given: :func:`_run`)."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [T, H, W, 3] uint8 RGB, got shape {frames.shape}")
    if frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8, got {frames.dtype}; convert with models.frames")
    if frames.shape[0] == 0:
        raise ValueError("frames is empty: nothing to encode")
    _, h, w, _ = frames.shape
    if out_args.get("pix_fmt") == "yuv420p" and (h % 2 or w % 2):
        raise ValueError(f"yuv420p needs even height and width, got {h}x{w}")
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = (
        ffmpeg.input("pipe:", format="rawvideo", pix_fmt="rgb24", s=f"{w}x{h}", framerate=fps)
        .output(str(path), r=fps, **out_args)
        .overwrite_output()
    )
    try:
        _run(stream, np.ascontiguousarray(frames).tobytes(), timeout_s)
    except ffmpeg.Error as err:
        raise VideoError(f"FFmpeg could not write {path}:\n{_tail(err.stderr)}") from err
    return path


def encode_mp4(
    frames: np.ndarray,
    path: str | Path,
    *,
    fps: int = 16,
    crf: int = 18,
    timeout_s: float | None = None,
) -> Path:
    """Encodes RGB frames to the viewable H.264 yuv420p mp4 (lossy); returns ``path``.

    Args:
        frames: uint8 [T, H, W, 3] RGB frames (H and W even).
        path: output file; its folder is created.
        fps: frame rate.
        crf: x264 constant rate factor (lower is better).
        timeout_s: FFmpeg's time limit (None: none; the preflight's probe sets one).

    Raises:
        ValueError: frames of the wrong shape or dtype, or odd height/width.
        VideoError: FFmpeg failed (its last lines are included), or ran over ``timeout_s``.
    """
    args = {"vcodec": "libx264", "crf": crf, "preset": "medium", "pix_fmt": "yuv420p"}
    return _encode(frames, Path(path), fps, timeout_s, **args)


def encode_lossless(
    frames: np.ndarray, path: str | Path, *, fps: int = 16, timeout_s: float | None = None
) -> Path:
    """Encodes RGB frames losslessly (FFV1 on planar RGB in Matroska), at any height and width:
    the decoded frames equal ``frames`` bit for bit. As :func:`encode_mp4`, but ``path`` must end
    in ``.mkv`` (else ValueError)."""
    path = Path(path)
    if path.suffix != ".mkv":
        raise ValueError(f"a lossless (FFV1) video goes in a .mkv file, got {path.name}")
    return _encode(frames, path, fps, timeout_s, vcodec="ffv1", level=3, pix_fmt="gbrp")


def lossless_path(video: str | Path) -> Path:
    """The measurement video that goes with a viewable one: ``dense.mp4`` -> ``dense.lossless.mkv``."""
    video = Path(video)
    return video.with_name(video.name.removesuffix(video.suffix) + LOSSLESS_SUFFIX)


def viewable_path(video: str | Path) -> Path | None:
    """The viewable video that goes with a measurement one (``dense.lossless.mkv`` ->
    ``dense.mp4``), or None when ``video`` is not named as a measurement video."""
    video = Path(video)
    if not video.name.endswith(LOSSLESS_SUFFIX):
        return None
    return video.with_name(video.name.removesuffix(LOSSLESS_SUFFIX) + ".mp4")


def decode_mp4(path: str | Path, timeout_s: float | None = None) -> np.ndarray:
    """Decodes a video file (mp4, mkv, any container FFmpeg reads) to uint8 RGB frames [T, H, W, 3]
    (each FFmpeg call within ``timeout_s`` when given).

    Raises:
        FileNotFoundError: the file does not exist.
        VideoError: FFmpeg could not read it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no video at {path}")

    def run(**options: Any) -> tuple[bytes, bytes]:
        output = ffmpeg.input(str(path)).output(
            "pipe:", format="rawvideo", pix_fmt="rgb24", **options
        )
        return _run(output, timeout_s=timeout_s)

    try:
        # The bundled FFmpeg has no ffprobe: read the size from a one-frame decode's log instead.
        width, height = _parse_size(run(vframes=1)[1])
        out, _ = run()
    except ffmpeg.Error as err:
        raise VideoError(f"FFmpeg could not read {path}:\n{_tail(err.stderr)}") from err
    return np.frombuffer(out, np.uint8).reshape(-1, height, width, 3)


def _parse_size(stderr: bytes) -> tuple[int, int]:
    text = stderr.decode("utf-8", "replace")
    # The output stream line, e.g. "Stream #0:0: Video: rawvideo (RGB[24] ...), rgb24, 384x256, ..."
    for line in reversed(text.splitlines()):
        if "Video: rawvideo" in line:
            match = re.search(r", (\d{2,5})x(\d{2,5})[,\s]", line)
            if match:
                return int(match.group(1)), int(match.group(2))
    raise VideoError("could not read the frame size from FFmpeg's output")


def label_band(labels: list[str], panel_width: int) -> np.ndarray:
    """A black band with one white label centred over each panel: uint8 [h, len * W, 3], ``h``
    a multiple of 16 (the codec's macroblock) sized to the panel (Pillow's built-in font)."""
    from PIL import Image, ImageDraw, ImageFont

    size = max(8, min(24, panel_width // 14))
    height = -(-(size + 8) // 16) * 16
    band = Image.new("RGB", (panel_width * len(labels), height))
    draw = ImageDraw.Draw(band)
    font = ImageFont.load_default(size=size)
    for i, text in enumerate(labels):
        width = draw.textlength(text, font=font)
        x = i * panel_width + max(0.0, (panel_width - width) / 2)
        draw.text((x, (height - size) / 2), text, fill=(255, 255, 255), font=font)
    return np.asarray(band, dtype=np.uint8)


def side_by_side(dense: np.ndarray, sparse: np.ndarray, gain: float = 8.0) -> np.ndarray:
    """Dense | sparse | their absolute difference times ``gain`` (clipped to 255, so small drift
    shows), along the width, under a band that names each panel: two uint8 [T, H, W, 3] videos
    into uint8 [T, h + H, 3W, 3].

    Raises:
        ValueError: the videos differ in shape.
    """
    if dense.shape != sparse.shape:
        raise ValueError(f"videos differ in shape: {dense.shape} vs {sparse.shape}")
    diff = np.abs(dense.astype(np.int16) - sparse.astype(np.int16)).astype(np.float32) * gain
    frames = np.concatenate([dense, sparse, np.clip(diff, 0, 255).astype(np.uint8)], axis=2)
    labels = ["dense", "sparse", f"|dense - sparse| x {gain:g}"]
    band = label_band(labels, dense.shape[2])
    return np.concatenate([np.broadcast_to(band, (len(frames), *band.shape)), frames], axis=1)
