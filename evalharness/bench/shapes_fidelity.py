"""``python -m evalharness.bench.shapes_fidelity``: does a model trained on shapes draw its prompt?

Runs the job's dense arm (its model: the shipped ``tiny`` or a folder exported by ``python -m
models.training``) on held-out (prompt, seed) pairs of the moving-shapes data
(``models.shapes_data.held_out_specs``: combinations training never saw), decodes each video and
reads it with ``models.shapes_detector``: the dominant non-background colour, the direction of
its centroid's motion and the R² of a straight-line fit to that track. A pair has the **colour
right** or the **direction right** when it is the prompt's, and is **smooth** when the R² is at
least ``--min-r2`` (every prompt asks for a constant velocity). The summary gives each as a share
of pairs beside the thresholds a learned default must meet (90%, 85%, and 85% of tracks with R²
>= 0.9); the exit status is 1 when one is missed. Nothing is timed.

Usage:
    python -m evalharness.bench.shapes_fidelity [--pairs 24] [--json] [OVERRIDE ...]
    python -m evalharness.bench.shapes_fidelity model.checkpoint=DIR/checkpoint  # your own
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from evalharness.assembly import (
    build_attention,
    build_components,
    encode_contexts,
    run_sampler,
    transformer_config_for,
)
from evalharness.bench.mlflow_record import emit
from evalharness.bench.report import report_markdown
from evalharness.bench.run_config import bench_parser, config_or_exit
from evalharness.config import EvalConfig
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from models.pipeline import DenoiseLoop
from models.shapes_data import ClipSpec, held_out_specs
from models.shapes_detector import detect

# What a learned default must show (the share of pairs, and the smoothness R²).
MIN_COLOUR_SHARE = 0.90
MIN_DIRECTION_SHARE = 0.85
MIN_R2 = 0.9
MIN_SMOOTH_SHARE = 0.85  # a track the detector lost cannot be smooth, so as the direction's


@dataclasses.dataclass(frozen=True)
class PairReading:
    """What the detector read from one pair's dense video against what its prompt asked.

    Attributes:
        seen_colour: the dominant colour read (None: nothing stood out from the background).
        seen_direction: the fitted direction ("static" when it barely moved; None without colour).
        r2: straight-line R² of the dominant colour's centroid track (0 without colour).
    """

    prompt: str
    seed: int
    colour: str
    direction: str
    seen_colour: str | None
    seen_direction: str | None
    r2: float

    @property
    def colour_right(self) -> bool:
        return self.seen_colour == self.colour

    @property
    def direction_right(self) -> bool:
        return self.seen_direction == self.direction

    def smooth(self, min_r2: float = MIN_R2) -> bool:
        return self.r2 >= min_r2


@dataclasses.dataclass(frozen=True)
class FidelitySummary:
    """Shares of pairs with the colour right, the direction right and a smooth track."""

    pairs: int
    colour_share: float
    direction_share: float
    smooth_share: float
    median_r2: float

    def meets(self) -> bool:
        """Whether every share reaches its threshold."""
        return (
            self.colour_share >= MIN_COLOUR_SHARE
            and self.direction_share >= MIN_DIRECTION_SHARE
            and self.smooth_share >= MIN_SMOOTH_SHARE
        )


def held_out_pairs(count: int) -> list[tuple[ClipSpec, int]]:
    """``count`` held-out (spec, seed) pairs spread evenly over the held-out combinations (so
    every background appears), each with its own noise seed."""
    specs = held_out_specs()
    if not 1 <= count <= len(specs):
        raise ValueError(f"pairs={count}: expected 1 to {len(specs)} (the held-out combinations)")
    picks = np.linspace(0, len(specs) - 1, count).round().astype(int)
    return [(specs[int(i)], 1000 + n) for n, i in enumerate(picks)]


def read_pairs(
    cfg: EvalConfig,
    pairs: Sequence[tuple[ClipSpec, int]],
    *,
    on_event: Callable[[str], None] = lambda message: None,
) -> list[PairReading]:
    """The dense arm of every pair, decoded and read by the detector (one model, loops compiled
    once)."""
    video = cfg.resolution.video
    tcfg = transformer_config_for(cfg.model)
    components = build_components(cfg.model, cfg.dtype, cfg.cache_dir)
    contexts, negative = encode_contexts(cfg, components, [spec.prompt for spec, _ in pairs])
    loop = DenoiseLoop(
        components.transformer,
        run_sampler(cfg),
        guidance_scale=cfg.guidance_scale,
        attend=build_attention(cfg, video, tcfg).dense,
    )
    readings = []
    for i, (spec, seed) in enumerate(pairs):
        start = time.perf_counter()
        noise = jax.random.normal(jax.random.key(seed), (1, *video.latent_shape()), jnp.float32)
        out = loop(noise, contexts[spec.prompt], negative)
        if not bool(out.finite):
            raise RuntimeError(f"pair {i} ({spec.prompt!r}, seed {seed}): NaN or Inf latents")
        detection = detect(components.decode(np.asarray(out.latents)))
        motion = detection.motion
        (obj,) = spec.objects
        readings.append(
            PairReading(
                prompt=spec.prompt,
                seed=seed,
                colour=obj.colour,
                direction=obj.direction,
                seen_colour=detection.colour,
                seen_direction=None if motion is None else motion.direction,
                r2=0.0 if motion is None else float(motion.r2),
            )
        )
        on_event(f"pair {i + 1}/{len(pairs)} in {time.perf_counter() - start:.1f} s")
    return readings


def summarize(readings: Sequence[PairReading], min_r2: float = MIN_R2) -> FidelitySummary:
    """The shares over ``readings``."""
    n = len(readings)
    return FidelitySummary(
        pairs=n,
        colour_share=sum(r.colour_right for r in readings) / n,
        direction_share=sum(r.direction_right for r in readings) / n,
        smooth_share=sum(r.smooth(min_r2) for r in readings) / n,
        median_r2=float(np.median([r.r2 for r in readings])),
    )


_COLUMNS = (
    ("prompt", "prompt", "{}"),
    ("seed", "seed", "{}"),
    ("colour read", "seen_colour", "{}"),
    ("direction read", "seen_direction", "{}"),
    ("R²", "r2", "{:.3f}"),
    ("right", "right", "{}"),
)


def format_report(
    readings: Sequence[PairReading], summary: FidelitySummary, setup: dict, min_r2: float
) -> str:
    """The readings and the summary as Markdown."""
    rows = [
        {
            **dataclasses.asdict(r),
            "right": ("colour " if r.colour_right else "")
            + ("direction" if r.direction_right else ""),
        }
        for r in readings
    ]
    verdict = "meets" if summary.meets() else "MISSES"
    return report_markdown(
        "Held-out prompts read back from the dense video",
        setup,
        markdown_table(rows, _COLUMNS),
        f"Colour right in {summary.colour_share:.0%} of {summary.pairs} pairs (needs "
        f"{MIN_COLOUR_SHARE:.0%}); direction right in {summary.direction_share:.0%} (needs "
        f"{MIN_DIRECTION_SHARE:.0%}); smooth track (R² >= {min_r2:g}) in "
        f"{summary.smooth_share:.0%} (needs {MIN_SMOOTH_SHARE:.0%}), median R² "
        f"{summary.median_r2:.3f}. Verdict: {verdict} the thresholds.",
        machine_info(),
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 1 when a threshold is missed, 2 on bad input."""
    parser = bench_parser("evalharness.bench.shapes_fidelity", __doc__, "steps=20")
    parser.add_argument("--pairs", type=int, default=24, help="held-out pairs (default 24)")
    parser.add_argument("--min-r2", type=float, default=MIN_R2, help="smooth-track R² (0.9)")
    args = parser.parse_args(argv)
    try:
        pairs = held_out_pairs(args.pairs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg = config_or_exit(parser, args.overrides)
    readings = read_pairs(
        cfg, pairs, on_event=lambda message: print(message, file=sys.stderr, flush=True)
    )
    summary = summarize(readings, args.min_r2)
    setup = {
        "model": cfg.model.name,
        "resolution": f"{cfg.resolution.frames}x{cfg.resolution.height}x{cfg.resolution.width}",
        "steps": cfg.steps,
        "sampler": cfg.sampler.value,
        "guidance": cfg.guidance_scale,
    }
    record = {
        "setup": setup,
        "machine": machine_info(),
        "readings": [dataclasses.asdict(r) for r in readings],
        "summary": dataclasses.asdict(summary),
        "meets": summary.meets(),
    }
    emit(args, record, format_report(readings, summary, setup, args.min_r2))
    return 0 if summary.meets() else 1


if __name__ == "__main__":
    sys.exit(main())
