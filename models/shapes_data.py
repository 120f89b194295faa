"""Text-to-video clips of moving shapes, drawn procedurally and deterministically from a seed.

A clip shows one or two shapes (circle, square, triangle), each in one of six colours, moving in a
straight line at constant velocity (left, right, up, down, up-right, down-left; slowly or quickly)
over a flat or gradient background; its English prompt says all of it ("a red circle moves slowly
to the left on a dark blue background"). Shapes are anti-aliased (one pixel of linear coverage
ramp) so the edges carry no aliasing the VAE would have to learn.

The held-out split
------------------
A *combination* is (shape, colour, motion, background) of one object. A fixed tenth of all
combinations, those whose SHA-256 of ``"shape|colour|direction|speed|background"`` is 0 modulo
10 (:func:`is_held_out`), is held out: training clips never contain a held-out combination (for
two-shape clips, neither object's), while every shape, colour, motion and background on its own
still appears in training. Evaluation prompts are single-object held-out combinations
(:func:`held_out_specs`), so the model is scored on prompts it never saw as a whole.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
from typing import Literal

import numpy as np

from models.tokenizer import WordTokenizer

SHAPES = ("circle", "square", "triangle")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "yellow": (240, 220, 40),
    "green": (40, 200, 60),
    "cyan": (40, 210, 230),
    "magenta": (220, 50, 210),
    "white": (245, 245, 245),
}
# name → (top colour, bottom colour); equal colours are a flat background.
BACKGROUNDS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "dark blue": ((20, 30, 100), (20, 30, 100)),
    "black": ((0, 0, 0), (0, 0, 0)),
    "dark grey": ((70, 70, 70), (70, 70, 70)),
    "purple to black gradient": ((90, 30, 110), (5, 0, 10)),
}
# direction → (dx, dy) unit vector in image coordinates (y grows downwards).
_DIAG = 1.0 / np.sqrt(2.0)
DIRECTIONS: dict[str, tuple[float, float]] = {
    "left": (-1.0, 0.0),
    "right": (1.0, 0.0),
    "up": (0.0, -1.0),
    "down": (0.0, 1.0),
    "up-right": (_DIAG, -_DIAG),
    "down-left": (-_DIAG, _DIAG),
}
DIRECTION_WORDS = {
    "left": "to the left",
    "right": "to the right",
    "up": "up",
    "down": "down",
    "up-right": "diagonally up and to the right",
    "down-left": "diagonally down and to the left",
}
# speed → distance travelled over the clip, as a fraction of the frame's short side.
SPEEDS: dict[str, float] = {"slowly": 0.25, "quickly": 0.5}
# Object size: the shape's circumradius as a fraction of the short side; a shape spans about 4-5 of
# the CPU preset's 12 x 20 tokens a side, so it is a sizeable share of what the transformer learns,
# and a quick vertical move (half the short side) still keeps it inside the frame.
_SIZE_RANGE = (0.17, 0.21)
HELD_OUT_MODULUS = 10
# The noun of a partial prompt that leaves the shape unsaid ("a red shape moves slowly up").
UNNAMED_SHAPE = "shape"

Split = Literal["train", "heldout"]


@dataclasses.dataclass(frozen=True)
class MovingShape:
    """One object of a clip: what it is and how it moves."""

    shape: str
    colour: str
    direction: str
    speed: str

    def __post_init__(self) -> None:
        for name, known in (
            ("shape", SHAPES),
            ("colour", COLOURS),
            ("direction", DIRECTIONS),
            ("speed", SPEEDS),
        ):
            if getattr(self, name) not in known:
                raise ValueError(f"{name}={getattr(self, name)!r}; known: {list(known)}")

    def phrase(self) -> str:
        """``"a red circle moves slowly to the left"``."""
        return f"a {self.colour} {self.shape} moves {self.speed} {DIRECTION_WORDS[self.direction]}"


@dataclasses.dataclass(frozen=True)
class ClipSpec:
    """What a clip shows: one or two objects on a background."""

    objects: tuple[MovingShape, ...]
    background: str

    def __post_init__(self) -> None:
        if self.background not in BACKGROUNDS:
            raise ValueError(f"background={self.background!r}; known: {list(BACKGROUNDS)}")
        if not 1 <= len(self.objects) <= 2:
            raise ValueError(f"a clip has one or two objects, got {len(self.objects)}")

    @property
    def prompt(self) -> str:
        """The English prompt that says everything the clip shows."""
        return (
            " and ".join(o.phrase() for o in self.objects) + f" on a {self.background} background"
        )


def prompt_words() -> tuple[str, ...]:
    """Every word a prompt of this language can hold, sorted (the trained model's vocabulary)."""
    template = MovingShape(SHAPES[0], next(iter(COLOURS)), "left", "slowly")
    spec = ClipSpec((template, template), next(iter(BACKGROUNDS)))
    phrases = [spec.prompt, *SHAPES, *COLOURS, *SPEEDS, *DIRECTION_WORDS.values(), *BACKGROUNDS]
    phrases.append(UNNAMED_SHAPE)
    return tuple(sorted({w for phrase in phrases for w in WordTokenizer.PATTERN.findall(phrase)}))


def is_held_out(obj: MovingShape, background: str) -> bool:
    """Whether the combination (shape, colour, motion, background) belongs to the held-out split."""
    key = f"{obj.shape}|{obj.colour}|{obj.direction}|{obj.speed}|{background}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % HELD_OUT_MODULUS == 0


@functools.cache
def _all_objects() -> tuple[MovingShape, ...]:
    return tuple(
        MovingShape(*combo) for combo in itertools.product(SHAPES, COLOURS, DIRECTIONS, SPEEDS)
    )


@functools.cache
def _training_objects(background: str) -> tuple[MovingShape, ...]:
    """The objects whose combination with ``background`` is not held out."""
    return tuple(o for o in _all_objects() if not is_held_out(o, background))


def held_out_specs() -> list[ClipSpec]:
    """Every single-object held-out combination, in a fixed order."""
    return [
        ClipSpec((obj,), background)
        for background in BACKGROUNDS
        for obj in _all_objects()
        if is_held_out(obj, background)
    ]


def sample_spec(rng: np.random.Generator, split: Split, two_shape_prob: float = 0.25) -> ClipSpec:
    """Draws a clip spec from a split.

    Args:
        rng: NumPy generator (the draw is deterministic given its state).
        split: "train" (no held-out combination in any object) or "heldout" (one object of a
            held-out combination).
        two_shape_prob: chance of a second object in a training clip (two objects differ in colour).
    """
    if split == "heldout":
        specs = held_out_specs()
        return specs[int(rng.integers(len(specs)))]
    if split != "train":
        raise ValueError(f"split={split!r}; use 'train' or 'heldout'")
    background = list(BACKGROUNDS)[int(rng.integers(len(BACKGROUNDS)))]
    allowed = _training_objects(background)
    first = allowed[int(rng.integers(len(allowed)))]
    if rng.random() >= two_shape_prob:
        return ClipSpec((first,), background)
    others = [o for o in allowed if o.colour != first.colour]
    return ClipSpec((first, others[int(rng.integers(len(others)))]), background)


def background_image(name: str, height: int, width: int) -> np.ndarray:
    """The background as float32 ``[H, W, 3]`` in 0..255 (a vertical gradient top → bottom)."""
    top, bottom = (np.asarray(c, np.float32) for c in BACKGROUNDS[name])
    ramp = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    return np.broadcast_to(top + (bottom - top) * ramp, (height, width, 3)).copy()


def _signed_distance(shape: str, dx: np.ndarray, dy: np.ndarray, radius: float) -> np.ndarray:
    """Distance in pixels outside (> 0) or inside (< 0) a shape centred at the origin."""
    if shape == "circle":
        return np.hypot(dx, dy) - radius
    if shape == "square":
        return np.maximum(np.abs(dx), np.abs(dy)) - radius * 0.8
    # Upward equilateral triangle with circumradius ``radius``: the largest edge distance.
    inradius = radius / 2.0
    normals = ((0.0, 1.0), (np.sqrt(3) / 2, -0.5), (-np.sqrt(3) / 2, -0.5))
    return np.max([nx * dx + ny * dy - inradius for nx, ny in normals], axis=0)


def object_tracks(
    spec: ClipSpec, frames: int, height: int, width: int, seed: int, spread: float = 1.0
) -> list[tuple[np.ndarray, float]]:
    """Each object's centre per frame (``[F, 2]`` as x, y pixels) and radius, from the seed.

    Start points are drawn so the whole shape stays inside the frame along its straight track:
    anywhere that allows (``spread`` 1), or within that fraction of the range around the
    centred track (``spread`` < 1: the track's midpoint near the frame's centre, so where the
    object is at the start and the end says its direction, even in the mean of many clips).
    """
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"spread={spread}: expected a fraction in [0, 1]")
    rng = np.random.default_rng(seed)
    short = min(height, width)
    tracks = []
    for obj in spec.objects:
        radius = float(rng.uniform(*_SIZE_RANGE)) * short
        travel = np.asarray(DIRECTIONS[obj.direction]) * SPEEDS[obj.speed] * short
        margin = radius + 1.0
        lo = np.array([margin, margin]) - np.minimum(travel, 0.0)
        hi = np.array([width - margin, height - margin]) - np.maximum(travel, 0.0)
        start = (lo + hi) / 2 + (rng.random(2) - 0.5) * spread * (hi - lo)
        t = np.linspace(0.0, 1.0, frames)[:, None]
        tracks.append((start + t * travel, radius))
    return tracks


def render_clip(
    spec: ClipSpec, frames: int, height: int, width: int, seed: int, spread: float = 1.0
) -> np.ndarray:
    """Renders the clip.

    Args:
        spec: what to draw.
        frames, height, width: the video's size (e.g. 33 x 192 x 320).
        seed: decides sizes and start points.
        spread: how far from the centred track start points may be (``object_tracks``).

    Returns:
        uint8 ``[frames, height, width, 3]``.
    """
    background = background_image(spec.background, height, width)
    video = np.repeat(background[None], frames, axis=0)
    for obj, (centres, radius) in zip(
        spec.objects, object_tracks(spec, frames, height, width, seed, spread), strict=True
    ):
        colour = np.asarray(COLOURS[obj.colour], np.float32)
        reach = int(np.ceil(radius)) + 2  # the shape and its anti-aliased edge fit in this box
        for f, (cx, cy) in enumerate(centres):
            y0, y1 = max(int(cy) - reach, 0), min(int(cy) + reach + 1, height)
            x0, x1 = max(int(cx) - reach, 0), min(int(cx) + reach + 1, width)
            ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32) + 0.5
            alpha = np.clip(0.5 - _signed_distance(obj.shape, xs - cx, ys - cy, radius), 0, 1)
            patch = video[f, y0:y1, x0:x1]
            video[f, y0:y1, x0:x1] = patch + (colour - patch) * alpha[..., None]
    return np.clip(np.rint(video), 0, 255).astype(np.uint8)


def draw_clip(seed: int, split: Split, two_shape_prob: float = 0.25) -> tuple[ClipSpec, int]:
    """The clip number ``seed`` of a split: its spec and the seed of its layout (sizes and start
    points, for :func:`render_clip` and :func:`object_tracks`)."""
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    spec = sample_spec(rng, split, two_shape_prob)
    return spec, int(rng.integers(2**31))


def make_clip(
    seed: int,
    split: Split,
    frames: int,
    height: int,
    width: int,
    two_shape_prob: float = 0.25,
    spread: float = 1.0,
) -> tuple[ClipSpec, np.ndarray]:
    """The clip number ``seed`` of a split: its spec and its uint8 ``[F, H, W, 3]`` frames
    (``spread``: :func:`object_tracks`)."""
    spec, layout_seed = draw_clip(seed, split, two_shape_prob)
    return spec, render_clip(spec, frames, height, width, layout_seed, spread)
