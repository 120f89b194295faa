"""``python -m evalharness.bench.host_side``: the host's cost per pixel of a run's video work.

After the arms are decoded, a run spends host time that no accelerator speeds up: each arm is
encoded twice (``<arm>.mp4`` to watch, ``<arm>.lossless.mkv`` to measure), the side-by-side
video once, and each measured arm (sparse, noise floor) is measured against the dense arm (raw-
frame PSNR and SSIM with scikit-image, FFmpeg's ``psnr`` on the lossless videos, the codec noise
of ``dense.mp4``). This benchmark runs exactly those functions
(``evalharness.evidence.run_folder`` / ``quality``) on a synthetic smooth video and prints
nanoseconds per pixel (pixel = frame x height x width of one arm's video), median (min-max) over
rounds, beside the figures the time estimate states (``evalharness.estimates.run_time``). A
machine much slower or faster than the stated one shows here; the estimate's constants say which
machine they were measured on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from evalharness.estimates import HOST_NS_PER_PIXEL
from evalharness.evidence import measure, run_folder
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info


def synthetic_frames(frames: int, height: int, width: int, seed: int) -> np.ndarray:
    """A smooth moving pattern with mild noise: uint8 [T, H, W, 3] (codecs see texture, not
    white noise, as in a generated video)."""
    rng = np.random.default_rng(seed)
    t, y, x = np.meshgrid(
        np.arange(frames), np.arange(height), np.arange(width), indexing="ij", sparse=True
    )
    base = 128 + 60 * np.sin((x + 3 * t) / 17.0) * np.cos((y - 2 * t) / 23.0)
    video = base[..., None] + np.array([0.0, 20.0, -20.0]) + rng.normal(0, 3, (frames, 1, 1, 3))
    return np.clip(video, 0, 255).astype(np.uint8)


def _arm(label: str, frames: np.ndarray) -> SimpleNamespace:
    """What ``write_arm_videos`` and ``measure`` read of an ``ArmResult``."""
    return SimpleNamespace(label=label, frames=frames, latents=np.zeros((1, 16, 1, 2, 2)))


def time_once(frames: np.ndarray, folder: Path) -> dict[str, float]:
    """Seconds of each host-side part for one dense + sparse + noise-floor comparison."""
    noisy = np.clip(frames.astype(np.int16) + 2, 0, 255).astype(np.uint8)
    dense, sparse, floor = _arm("dense", frames), _arm("sparse", noisy), _arm("noise_floor", frames)
    cfg = SimpleNamespace(fps=16, crf=18)
    start = time.perf_counter()
    videos = run_folder.write_arm_videos(folder, dense, sparse, floor, cfg)
    encoded = time.perf_counter()
    run_folder.write_side_by_side(folder, dense, sparse, cfg)
    side = time.perf_counter()
    measure(videos.dense, videos.sparse, dense, sparse, codec_video=videos.dense_mp4)
    measured = time.perf_counter()
    return {
        "encode": (encoded - start) / 3,  # per arm
        "side_by_side": side - encoded,
        "measure": measured - side,  # per measured arm
    }


def main(argv: list[str] | None = None) -> None:
    """Prints the per-pixel cost of each host-side part (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=17)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    frames = synthetic_frames(args.frames, args.height, args.width, seed=0)
    pixels = frames.shape[0] * frames.shape[1] * frames.shape[2]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            runs.append(time_once(frames, folder))
    rows = []
    for part in runs[0]:
        ns = [1e9 * r[part] / pixels for r in runs]
        rows.append(
            {
                "part": part,
                "median": statistics.median(ns),
                "min": min(ns),
                "max": max(ns),
                "stated": HOST_NS_PER_PIXEL[part],
            }
        )
    columns = [("part", "part", "{}")] + [
        (f"{k} ns/pixel", k, "{:,.1f}") for k in ("median", "min", "max", "stated")
    ]
    print(
        f"Host-side video work, {args.frames} x {args.height} x {args.width}, "
        f"{args.rounds} rounds on {machine_info()['processor']} x {machine_info()['cpu_count']} "
        f"cores (load {os.getloadavg()[0]:.1f})\n"
    )
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
