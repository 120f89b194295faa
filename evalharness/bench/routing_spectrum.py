"""``python -m evalharness.bench.routing_spectrum``: routing on layout-neutral synthetic heads.

One head per temporal share (``kernels.policy.synthetic_heads``), routed over every query row and
over frame 0's rows alone, at the CPU preset's token grid and at Wan's 21 latent frames: a sound
routing follows the share monotonically and has no frame-0 bias (docs/against-sparse-videogen.md).
The band is the run's ``schedule`` at each geometry (the run's overrides as arguments).

Usage:
    python -m evalharness.bench.routing_spectrum [OVERRIDE ...]
    python -m evalharness.bench.routing_spectrum schedule.density=0.25   # or schedule=aggressive
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from evalharness.bench.run_config import config_or_exit
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
    parser.add_argument(
        "overrides", nargs="*", help="the run's Hydra overrides, e.g. schedule=aggressive"
    )
    schedule = config_or_exit(parser, parser.parse_args(argv).overrides, resolve=False).schedule
    for geometry in GEOMETRIES:
        density = schedule.target_density(geometry)
        print(f"\n{geometry} ({geometry.tokens:,} tokens), band density {density:g}\n")
        print(markdown_table(routing_spectrum(geometry, density, SPECTRUM), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
