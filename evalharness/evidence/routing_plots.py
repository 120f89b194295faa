"""Routing evidence of a run: its statistics as ``routing_stats.npz`` and the step x layer temporal
fraction as a PNG heat map (plotted here, so the kernels never import matplotlib).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernels.policy.routing_stats import RoutingStats


def plot_temporal_fraction(stats: RoutingStats, path: str | Path, *, title: str = "") -> Path:
    """Writes the step x layer heat map of the temporal fraction as a PNG: dense cells grey, the
    colour scale fixed to [0, 1] so maps compare across runs.

    Args:
        stats: recorded routing statistics.
        path: output file (parent folders are created).
        title: optional figure title.

    Returns:
        The written path.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on the machines this runs on
    import matplotlib.pyplot as plt

    fraction = stats.temporal_fraction()  # [steps, layers]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps, layers = fraction.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.25 * layers + 2.0), max(3.0, 0.2 * steps + 1.5)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    image = ax.imshow(
        np.ma.masked_invalid(fraction),
        cmap=cmap,
        vmin=0.0,
        vmax=1.0,
        aspect="auto",
        origin="upper",
        interpolation="nearest",
    )
    ax.set_xlabel("layer")
    ax.set_ylabel("denoising step")
    ax.set_title(title or "fraction of heads routed temporal (grey: dense)")
    fig.colorbar(image, ax=ax, label="temporal fraction")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def save_routing_stats(stats: RoutingStats, run_dir: Path, schedule_name: str) -> None:
    """Writes ``routing_stats.npz`` (flags and errors per step, layer, batch and head, and the
    temporal fraction) and ``routing_heatmap.png`` into ``run_dir``, the heat map titled with
    ``schedule_name``."""
    np.savez(
        run_dir / "routing_stats.npz",
        temporal=stats.temporal,
        spatial_error=stats.spatial_error,
        temporal_error=stats.temporal_error,
        temporal_fraction=stats.temporal_fraction(),
    )
    plot_temporal_fraction(
        stats,
        run_dir / "routing_heatmap.png",
        title=f"heads routed temporal · schedule {schedule_name}",
    )
