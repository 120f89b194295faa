"""``python -m evalharness.bench.routing_spectrum``: routing on layout-neutral synthetic heads.

One head per temporal share (``kernels.policy.synthetic_heads``), routed over every query row and
over frame 0's rows alone, at the CPU preset's token grid and at Wan's 21 latent frames: a sound
routing follows the share monotonically and has no frame-0 bias (a purely temporal head's temporal
error stays below its spatial error on frame 0's rows too). docs/against-sparse-videogen.md.

Usage:
    python -m evalharness.bench.routing_spectrum [--density 0.35]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from evalharness.formatting import markdown_table
from kernels.masks.geometry import TokenGeometry
from kernels.policy.synthetic_heads import SPECTRUM, routing_spectrum

GEOMETRIES = (TokenGeometry(9, 12, 20), TokenGeometry(21, 6, 10))
COLUMNS = (
    ("share", "share", "{:.2f}"),
    ("spatial error", "spatial_error", "{:.3e}"),
    ("temporal error", "temporal_error", "{:.3e}"),
    ("routed", "routed", "{}"),
    ("frame 0: spatial", "frame0_spatial_error", "{:.3e}"),
    ("frame 0: temporal", "frame0_temporal_error", "{:.3e}"),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the spectrum's Markdown table at each geometry (one row per share)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--density", type=float, default=0.35, help="the band's kept fraction")
    args = parser.parse_args(argv)
    if not 0.0 < args.density <= 1.0:
        parser.error(f"--density={args.density}: expected a kept fraction in (0, 1]")
    for geometry in GEOMETRIES:
        print(f"\n{geometry} ({geometry.tokens:,} tokens), band density {args.density}\n")
        print(markdown_table(routing_spectrum(geometry, args.density, SPECTRUM), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
