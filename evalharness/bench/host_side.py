"""``python -m evalharness.bench.host_side``: the host's cost per pixel of a run's video work.

After the arms are decoded a run spends host time no accelerator speeds up: each arm is encoded
twice (``<arm>.mp4`` to watch, ``<arm>.lossless.mkv`` to measure), the side-by-side video once,
and each measured arm is measured against the dense arm (raw-frame PSNR and SSIM, FFmpeg's
``psnr`` on the lossless videos, the codec noise of ``dense.mp4``). This runs exactly those
functions (``evalharness.evidence.run_folder`` / ``quality``) on a synthetic smooth video of the
run's ``resolution`` (encoded at its ``fps`` and ``crf``) and prints nanoseconds per pixel (frame
x height x width of one arm's video), median (min-max) over ``warm_runs`` rounds (every one
timed: nothing compiles), beside the figures the time estimate states
(``evalharness.estimates.run_time``, which says which machine they were measured on).

Usage:
    python -m evalharness.bench.host_side [--json] [OVERRIDE ...]
    python -m evalharness.bench.host_side resolution=480p resolution.frames=17  # 17 x 480 x 832
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from evalharness.arms import time_interleaved
from evalharness.bench.mlflow_record import emit
from evalharness.bench.run_config import bench_parser, config_or_exit
from evalharness.config import EvalConfig
from evalharness.estimates import HOST_NS_PER_PIXEL
from evalharness.evidence import measure, run_folder
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info, machine_line

# Calls per part in one round: encode writes three arms (the table is per arm).
PER_CALL = {"encode": 3}


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


def host_parts(frames: np.ndarray, cfg: EvalConfig, folders: Iterator[Path]) -> dict[str, Any]:
    """Part name -> zero-argument call of the host-side parts of one dense + sparse +
    noise-floor comparison, in a run's order: each round encodes the arms into the next of
    ``folders`` (one empty folder per round), writes the side-by-side video there and measures
    the sparse arm against the dense one.

    Args:
        frames: uint8 [T, H, W, 3], the dense and noise-floor arms' video (the sparse arm's is
            two levels brighter).
        cfg: the run's config (``fps``, ``crf``).
    """
    noisy = np.clip(frames.astype(np.int16) + 2, 0, 255).astype(np.uint8)
    dense, sparse, floor = _arm("dense", frames), _arm("sparse", noisy), _arm("noise_floor", frames)
    state: dict[str, Any] = {}

    def encode() -> None:
        state["folder"] = next(folders)
        state["videos"] = run_folder.write_arm_videos(state["folder"], dense, sparse, floor, cfg)

    def side_by_side() -> None:
        run_folder.write_side_by_side(state["folder"], dense, sparse, cfg)

    def measured() -> None:
        videos = state["videos"]
        measure(videos.dense, videos.sparse, dense, sparse, codec_video=videos.dense_mp4)

    return {"encode": encode, "side_by_side": side_by_side, "measure": measured}


def main(argv: list[str] | None = None) -> None:
    """Prints the per-pixel cost of each host-side part (Markdown, or JSON with ``--json``)."""
    parser = bench_parser("evalharness.bench.host_side", __doc__, "resolution=480p warm_runs=3")
    args = parser.parse_args(argv)
    cfg = config_or_exit(parser, args.overrides, resolve=False)
    res = cfg.resolution
    frames = synthetic_frames(res.frames, res.height, res.width, seed=0)
    pixels = frames.shape[0] * frames.shape[1] * frames.shape[2]
    with tempfile.TemporaryDirectory() as tmp:
        folders = [Path(tmp) / str(i) for i in range(cfg.warm_runs)]
        for folder in folders:
            folder.mkdir()
        # No warm-up: every round is timed, the first one included (no compile to exclude).
        times = time_interleaved(host_parts(frames, cfg, iter(folders)), cfg.warm_runs)
    rows = []
    for part, t in times.items():
        ns = 1e9 / pixels / PER_CALL.get(part, 1)
        rows.append(
            {
                "part": part,
                "median": t.median_s * ns,
                "min": t.min_s * ns,
                "max": t.max_s * ns,
                "stated": HOST_NS_PER_PIXEL[part],
            }
        )
    columns = [("part", "part", "{}")] + [
        (f"{k} ns/pixel", k, "{:,.1f}") for k in ("median", "min", "max", "stated")
    ]
    machine = machine_info()
    title = (
        f"Host-side video work, {res.frames} x {res.height} x {res.width}, {cfg.warm_runs} "
        f"rounds (load {os.getloadavg()[0]:.1f})\n{machine_line(machine)}\n\n"
    )
    result = {"machine": machine, "pixels": pixels, "rows": rows}
    emit(args, result, title + markdown_table(rows, columns))


if __name__ == "__main__":
    main()
