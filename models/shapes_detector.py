"""Reads a moving-shapes clip back from its frames: the object's colour, its track and its motion.

Works on any RGB video of the kind ``models.shapes_data`` draws (the generator's own clips or a
model's decoded frames), knowing nothing but the palette:

- **background**: per row, the median over columns and frames (shapes cover a minority of any row,
  and the backgrounds are flat or vertical gradients);
- **colour masks**: pixels further than ``foreground_distance`` from their row's background, each
  given the nearest palette colour if it lies within ``colour_distance`` of it (blended edge pixels
  and artefacts count for none);
- **dominant colour**: the palette colour with the most masked pixels over the whole clip;
- **track**: that colour's centroid per frame (frames where it has too few pixels are skipped);
- **motion**: a least-squares straight line through the track; its displacement over the clip
  gives the direction (the nearest of ``DIRECTIONS`` by angle) and the speed (the nearest of
  ``SPEEDS``), and its R² says how straight and even the track is (1 for constant velocity).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from models.shapes_data import COLOURS, DIRECTIONS, SPEEDS

_PALETTE_NAMES = tuple(COLOURS)
_PALETTE = np.asarray([COLOURS[n] for n in _PALETTE_NAMES], np.float32)


@dataclasses.dataclass(frozen=True)
class Motion:
    """A colour's track and the straight line through it.

    Attributes:
        colour: the palette colour tracked.
        track: ``[F, 2]`` centroid (x, y) per frame in pixels; NaN where the colour was not seen.
        direction: nearest of ``DIRECTIONS`` to the fitted displacement, or "static" when it moved
            less than ``min_travel`` of the short side.
        speed: nearest of ``SPEEDS`` by distance travelled.
        travel: fitted displacement over the clip as a fraction of the frame's short side.
        r2: coefficient of determination of the straight-line fit (x and y residuals pooled).
    """

    colour: str
    track: np.ndarray
    direction: str
    speed: str
    travel: float
    r2: float


@dataclasses.dataclass(frozen=True)
class Detection:
    """What the detector reads from a clip: the dominant colour and its motion.

    Attributes:
        colour: the dominant non-background palette colour (None when nothing stands out).
        pixel_counts: masked pixels per palette colour over the clip.
        motion: the dominant colour's :class:`Motion` (None when there is no colour).
    """

    colour: str | None
    pixel_counts: dict[str, int]
    motion: Motion | None


def background_rows(frames: np.ndarray) -> np.ndarray:
    """Per-row background colour ``[H, 3]`` float32: the median over frames and columns."""
    f, h, w, _ = frames.shape
    return np.median(frames.transpose(1, 0, 2, 3).reshape(h, f * w, 3), axis=1).astype(np.float32)


def colour_labels(
    frames: np.ndarray, *, foreground_distance: float = 60.0, colour_distance: float = 90.0
) -> np.ndarray:
    """Palette index of every pixel, -1 for background or unclassified: int8 ``[F, H, W]``."""
    video = frames.astype(np.float32)
    away = np.sum((video - background_rows(frames)[None, :, None, :]) ** 2, axis=-1)
    labels = np.full(frames.shape[:3], -1, np.int8)
    candidates = away > foreground_distance**2
    pixels = video[candidates]  # [n, 3]: only the foreground is matched against the palette
    to_palette = np.sum((pixels[:, None, :] - _PALETTE[None]) ** 2, axis=-1)
    nearest = np.argmin(to_palette, axis=-1)
    close = to_palette[np.arange(len(pixels)), nearest] < colour_distance**2
    labels[candidates] = np.where(close, nearest, -1)
    return labels


def _fit_line(track: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares (x, y) = a + b t over the seen frames: (displacement over the clip, R²)."""
    t = np.arange(len(track), dtype=np.float64)
    seen = ~np.isnan(track[:, 0])
    if seen.sum() < 3:
        return np.zeros(2), 0.0
    ts, pts = t[seen], track[seen].astype(np.float64)
    design = np.stack([np.ones_like(ts), ts], axis=1)
    coef, *_ = np.linalg.lstsq(design, pts, rcond=None)
    residual = float(np.sum((pts - design @ coef) ** 2))
    total = float(np.sum((pts - pts.mean(axis=0)) ** 2))
    r2 = 1.0 - residual / total if total > 0 else 0.0
    return coef[1] * (len(track) - 1), r2


def track_motion(
    labels: np.ndarray, colour: str, *, min_pixels: int = 20, min_travel: float = 0.08
) -> Motion:
    """The motion of one palette colour in a labelled clip (see :func:`colour_labels`)."""
    index = _PALETTE_NAMES.index(colour)
    f, h, w = labels.shape
    ys, xs = np.mgrid[0:h, 0:w]
    track = np.full((f, 2), np.nan)
    for i in range(f):
        mask = labels[i] == index
        if mask.sum() >= min_pixels:
            track[i] = (xs[mask].mean(), ys[mask].mean())
    displacement, r2 = _fit_line(track)
    travel = float(np.hypot(*displacement)) / min(h, w)
    direction, speed = "static", min(SPEEDS, key=SPEEDS.get)
    if travel >= min_travel:
        unit = displacement / np.hypot(*displacement)
        direction = max(DIRECTIONS, key=lambda d: float(np.dot(unit, DIRECTIONS[d])))
        speed = min(SPEEDS, key=lambda s: abs(SPEEDS[s] - travel))
    return Motion(colour, track, direction, speed, travel, r2)


def detect(frames: np.ndarray) -> Detection:
    """Reads the dominant colour and its motion from uint8 frames ``[F, H, W, 3]``."""
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames shape {frames.shape}: expected [F, H, W, 3]")
    labels = colour_labels(frames)
    counts = np.bincount(labels[labels >= 0].ravel(), minlength=len(_PALETTE_NAMES))
    pixel_counts = {n: int(c) for n, c in zip(_PALETTE_NAMES, counts, strict=True)}
    if counts.sum() == 0:
        return Detection(None, pixel_counts, None)
    colour = _PALETTE_NAMES[int(np.argmax(counts))]
    return Detection(colour, pixel_counts, track_motion(labels, colour))
