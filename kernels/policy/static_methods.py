"""Static-mask methods: one fixed mask per run, the same for every head, no routing.

A schedule names its method (``SparsitySchedule.method``): ``svg`` is Sparse VideoGen's routed
band (``kernels.masks.band``); the others here are static masks that the block-sparse executors
run as they run the band, on tokens in the mask's own layout:

- ``sta``: Sliding Tile Attention (``kernels.masks.sta``), in its tile order (``TileOrder``);
- ``radial``: Radial Attention (``kernels.masks.radial``), in the model's frame-major order.

Each takes its paper's parameters by name (``sta_window``, ``sta_tile``; ``radial_decay_factor``);
left unset, the parameter is the one whose exact kept fraction is closest to the schedule's
``density`` (the density knob a matched comparison turns).
"""

from __future__ import annotations

import itertools

from kernels.masks.geometry import TokenGeometry
from kernels.masks.protocols import Mask
from kernels.masks.radial import RadialMask
from kernels.masks.sta import StaMask, TileOrder

METHODS = ("svg", "sta", "radial")
STATIC_METHODS = ("sta", "radial")

# Bounds of the decay factor the density knob searches (the window saturates well below the top).
_DECAY_RANGE = (1e-3, 1e4)


def _axis_windows(tiles: int) -> list[int]:
    """The distinct window sizes along an axis of ``tiles`` tiles: odd sizes below it, and it."""
    return sorted({*range(1, tiles, 2), tiles})


def sta_window_for_density(
    geometry: TokenGeometry, tile: tuple[int, int, int], density: float
) -> tuple[int, int, int]:
    """The STA window whose exact kept fraction is closest to ``density``.

    Ties go to the window closest in shape to the grid (the smallest spread of its per-axis
    fractions of the grid), then to the smaller window.

    Args:
        geometry: token geometry.
        tile: STA tile in tokens (frames, rows, columns).
        density: target kept fraction in (0, 1].

    Returns:
        (kt, kh, kw) in tiles.
    """
    order = TileOrder(geometry, tuple(tile))
    best = None
    for window in itertools.product(*(_axis_windows(n) for n in order.grid)):
        kept = StaMask(order, window).density
        spread = max(k / n for k, n in zip(window, order.grid, strict=True)) - min(
            k / n for k, n in zip(window, order.grid, strict=True)
        )
        key = (abs(kept - density), round(spread, 9), sum(window))
        if best is None or key < best[0]:
            best = (key, window)
    return best[1]


def radial_decay_for_density(geometry: TokenGeometry, density: float) -> float:
    """The Radial decay factor whose exact kept fraction is closest to ``density``.

    The kept fraction grows with the decay factor in steps; below the smallest (the 128-token
    window floor everywhere) or above the largest, the nearest end is returned.

    Args:
        geometry: token geometry.
        density: target kept fraction in (0, 1].

    Returns:
        The decay factor (a float > 0).
    """
    lo, hi = _DECAY_RANGE
    if RadialMask(geometry, hi).density <= density:
        return hi
    for _ in range(80):  # bisect on a log scale for the first factor reaching the target
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if RadialMask(geometry, mid).density < density else (lo, mid)
    below, above = RadialMask(geometry, lo).density, RadialMask(geometry, hi).density
    return lo if abs(below - density) < abs(above - density) else hi


def static_mask(
    method: str,
    geometry: TokenGeometry,
    density: float,
    *,
    sta_window: tuple[int, int, int] | None,
    sta_tile: tuple[int, int, int],
    radial_decay_factor: float | None,
) -> Mask:
    """The static mask of ``method`` at ``geometry``, in the method's own token layout.

    Args:
        method: one of ``STATIC_METHODS``.
        geometry: token geometry.
        density: the kept fraction a parameter left unset is chosen for.
        sta_window: STA's window in tiles, or None (chosen for ``density``).
        sta_tile: STA's tile in tokens.
        radial_decay_factor: Radial's decay factor, or None (chosen for ``density``).

    Returns:
        A ``StaMask`` (tile order) or a ``RadialMask`` (frame-major).
    """
    if method == "sta":
        window = sta_window or sta_window_for_density(geometry, sta_tile, density)
        return StaMask(TileOrder(geometry, tuple(sta_tile)), tuple(window))
    if method == "radial":
        decay = radial_decay_factor or radial_decay_for_density(geometry, density)
        return RadialMask(geometry, decay)
    raise ValueError(f"method={method!r} has no static mask; static methods: {STATIC_METHODS}")


def static_layout(mask: Mask) -> TileOrder | None:
    """The layout a static mask is applied in: STA's tile order, or None (frame-major)."""
    return mask.order if isinstance(mask, StaMask) else None
