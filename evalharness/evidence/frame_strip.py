"""``python -m evalharness.evidence.frame_strip RUN_DIR OUT.png``: a still of a run's comparison.

Reads a run folder's measurement videos (``dense.lossless.mkv``, ``sparse.lossless.mkv``: the exact
frames the metrics were computed on), lays out dense | sparse | amplified difference as
``side_by_side.mp4`` does (``evalharness.evidence.video.side_by_side``) and stacks a few frames of
it into one PNG, for documentation and reviews where a video cannot be embedded.

Usage:
    python -m evalharness.evidence.frame_strip outputs/runs/<run> docs/images/default-job.png \\
        [--frames 0 16 32] [--gain 8]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from evalharness.evidence.video import LOSSLESS_SUFFIX, decode_mp4, side_by_side


def frame_strip(
    dense: np.ndarray, sparse: np.ndarray, frames: Sequence[int], gain: float = 8.0
) -> np.ndarray:
    """uint8 ``[rows, width, 3]``: the side-by-side layout of each of ``frames``, top to bottom
    (the label band once, above the first).

    Raises:
        ValueError: videos of different shapes, or a frame index outside the video.
    """
    if dense.shape != sparse.shape:
        raise ValueError(f"dense {dense.shape} and sparse {sparse.shape} videos differ in shape")
    bad = [f for f in frames if not 0 <= f < len(dense)]
    if bad or not frames:
        raise ValueError(f"frames {list(frames)}: expected indices in 0..{len(dense) - 1}")
    panels = side_by_side(dense, sparse, gain)
    band = panels.shape[1] - dense.shape[1]
    return np.concatenate([panels[frames[0], :band], *(panels[f, band:] for f in frames)], axis=0)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 2 when the run folder lacks its videos."""
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.evidence.frame_strip",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", type=Path, help="a run folder (outputs/runs/<run>)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--frames", type=int, nargs="+", default=[0, 16, 32])
    parser.add_argument("--gain", type=float, default=8.0, help="difference amplification")
    args = parser.parse_args(argv)
    videos = [args.run_dir / f"{arm}{LOSSLESS_SUFFIX}" for arm in ("dense", "sparse")]
    missing = [str(v) for v in videos if not v.is_file()]
    if missing:
        print(
            f"error: {', '.join(missing)} not found; pass a run folder of python -m evalharness "
            "(outputs/runs/<run>)",
            file=sys.stderr,
        )
        return 2
    dense, sparse = (decode_mp4(v) for v in videos)
    try:
        strip = frame_strip(dense, sparse, args.frames, args.gain)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(strip).save(args.out, optimize=True)
    print(
        f"{args.out}: frames {args.frames} of {args.run_dir}, {strip.shape[1]} x {strip.shape[0]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
