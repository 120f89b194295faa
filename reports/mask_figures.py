"""The SVG masks of a run's geometry in both layouts, and the tile classes of its plans
(seed Figures 3 and 5 in spirit), computed from ``kernels.masks`` and ``kernels.plans``.

A mask is drawn by evaluating its predicate on at most ``MAX_PIXELS`` evenly spaced query and key
indices, so a 720p geometry (75,600 tokens) costs no more than a CPU one; the axes are in token
indices of the whole sequence and the figure says how many it sampled.

Densities are named precisely, since two differ: the band density of the sparse layers (the
schedule's ``density``, what each mask keeps) and Table 3's kept pairs over the whole run, in which
the dense steps and layers count whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from evalharness.config import token_geometry  # noqa: E402
from kernels.masks import BandMask, TokenGeometry, temporal_permutation  # noqa: E402
from kernels.plans import BlockSizes, TilePlan, build_plan  # noqa: E402
from kernels.policy import SparsitySchedule  # noqa: E402
from models.video_geometry import VideoGeometry  # noqa: E402
from reports.sources import ReportRun  # noqa: E402

MAX_PIXELS = 480
# Tile classes as in JAX splash attention's block mask: 0 empty (skipped), 1 partial, 2 full.
TILE_CLASSES = ("empty (skipped)", "partial (masked)", "full (mask-free)")
_TILE_COLORS = ListedColormap(["#f4f4f4", "#f2b134", "#2a6f97"])


@dataclass(frozen=True)
class PlanChoice:
    """The geometry, density and tiles of a run's sparse attention."""

    run: str
    geometry: TokenGeometry
    density: float
    block_sizes: BlockSizes
    variant: str
    run_kept_fraction: float | None = None
    svg_sparsity: float | None = None

    @property
    def band(self) -> BandMask:
        """The band the run's sparse layers applied (the schedule decides, as in the run)."""
        schedule = SparsitySchedule(
            self.run, first_times_fp=0.0, density=self.density, svg_sparsity=self.svg_sparsity
        )
        return schedule.band(self.geometry)

    @property
    def label(self) -> str:
        """Two lines: run, token grid and tiles; the band density and the run-wide kept pairs."""
        g = self.geometry
        kept = f"band density {self.band.density:.3g} (sparse layers)"
        if self.svg_sparsity is not None:
            kept += f", SVG sparsity {self.svg_sparsity:g}"
        if self.run_kept_fraction is not None:
            kept += f"; kept pairs, whole run {self.run_kept_fraction:.3f} (Table 3)"
        return (
            f"{self.run}: {g.frames} x {g.height} x {g.width} tokens ({g.tokens:,}), tiles "
            f"{self.block_sizes.block_q} x {self.block_sizes.block_kv}\n{kept}"
        )


def plan_choice(run: ReportRun) -> PlanChoice:
    """The sparse attention of a harness run, from its params (``resolution.*``, ``schedule.*``,
    ``kernel.*``)."""
    p = run.params
    video = VideoGeometry(
        frames=int(p["resolution.frames"]),
        height=int(p["resolution.height"]),
        width=int(p["resolution.width"]),
    )
    return PlanChoice(
        run=f"{run.tags.get('schedule', '?')} @ {run.tags.get('resolution', '?')}",
        geometry=token_geometry(video),
        density=float(p["schedule.density"]),
        block_sizes=BlockSizes(int(p["kernel.block_q"]), int(p["kernel.block_kv"])),
        variant=p.get("schedule.variant", "b3"),
        run_kept_fraction=run.metrics.get("schedule_kept_fraction"),
        svg_sparsity=_optional_float(p.get("schedule.svg_sparsity")),
    )


def _optional_float(value: str | None) -> float | None:
    """An MLflow param that may be absent or logged as "None"."""
    return None if value in (None, "None", "") else float(value)


def _samples(tokens: int) -> np.ndarray:
    return np.unique(np.linspace(0, tokens - 1, min(tokens, MAX_PIXELS)).round().astype(np.int64))


def mask_images(choice: PlanChoice) -> dict[str, np.ndarray]:
    """Sampled bool images [q, k] of both head types in both layouts.

    Keys: "spatial, frame-major" (band), "temporal, frame-major" (stripes),
    "spatial, temporal-major" (stripes), "temporal, temporal-major" (band).
    """
    geometry = choice.geometry
    band = choice.band
    idx = _samples(geometry.tokens)
    perm = temporal_permutation(geometry).astype(np.int64)  # temporal position -> frame-major
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size)  # frame-major -> temporal position
    q, k = idx[:, None], idx[None, :]
    return {
        "spatial, frame-major": band.allowed(q, k),
        "temporal, frame-major": band.allowed(inverse[q], inverse[k]),
        "spatial, temporal-major": band.allowed(perm[q], perm[k]),
        "temporal, temporal-major": band.allowed(q, k),
    }


def tile_classes(plan: TilePlan) -> np.ndarray:
    """int8 [q_tiles, kv_tiles]: 0 empty, 1 partial (visited with a mask), 2 full (mask-free)."""
    classes = np.zeros((plan.num_q_tiles, plan.num_kv_tiles), np.int8)
    for i in range(plan.num_q_tiles):
        classes[i, plan.partial_kv[i, : plan.partial_count[i]]] = 1
        classes[i, plan.full_kv[i, : plan.full_count[i]]] = 2
    return classes


def masks_figure(choice: PlanChoice, path: Path) -> Path:
    """The four mask images (head type x layout), saved as a PNG; axes in token indices."""
    images = mask_images(choice)
    tokens = choice.geometry.tokens
    sampled = len(_samples(tokens))
    every = "every token" if sampled == tokens else f"{sampled:,} of {tokens:,} sampled evenly"
    fig, axes = plt.subplots(2, 2, figsize=(8, 8.4))
    for ax, (title, image) in zip(axes.flat, images.items(), strict=True):
        extent = (0, tokens, tokens, 0)  # label the axes in tokens, not in sampled pixels
        ax.imshow(image, cmap="Greys", interpolation="nearest", extent=extent)
        ax.set_title(f"{title}: {image.mean():.1%} of pairs kept", fontsize=10)
        ax.set_xlabel(f"key token ({every})", fontsize=8)
        ax.set_ylabel(f"query token ({every})", fontsize=8)
    sinks = "sink: frame 0 (spatial), the temporal layout's first S tokens (temporal)"
    fig.suptitle(f"SVG masks, {sinks}\n{choice.label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def tile_classes_figure(choice: PlanChoice, path: Path) -> Path:
    """Tile classes of the B2 plan (exact mask) and of the run's plan (B3: tile-rounded mask)."""
    band = choice.band
    variants = ["b2", choice.variant] if choice.variant != "b2" else ["b1", "b2"]
    fig, axes = plt.subplots(1, len(variants), figsize=(4.5 * len(variants), 5.2))
    for ax, variant in zip(np.atleast_1d(axes), variants, strict=True):
        plan = build_plan(band, choice.block_sizes, variant, None)
        classes = tile_classes(plan)
        ax.imshow(classes, cmap=_TILE_COLORS, vmin=0, vmax=2, interpolation="nearest")
        counts = [int((classes == c).sum()) for c in range(3)]
        ax.set_title(
            f"{variant.upper()}: "
            + ", ".join(f"{n} {t.split()[0]}" for n, t in zip(counts, TILE_CLASSES, strict=True)),
            fontsize=9,
        )
        ax.set_xlabel("key tile")
        ax.set_ylabel("query tile")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=_TILE_COLORS(c / 2)) for c in range(len(TILE_CLASSES))
    ]
    fig.legend(handles, TILE_CLASSES, loc="lower center", ncol=3, fontsize=9)
    fig.suptitle(f"Tile classes, spatial band\n{choice.label}", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
