"""Pixel geometry of a Wan 2.1 video → latent geometry → transformer tokens.

The Wan VAE compresses time by 4 (keeping the first frame on its own) and space by 8; the
transformer's patch embedding then groups (1, 2, 2) latent cells into one token. Hence frames must be
4k+1 and height/width multiples of 16.
"""

from __future__ import annotations

import dataclasses

VAE_TEMPORAL_STRIDE = 4
VAE_SPATIAL_STRIDE = 8
PATCH_SIZE = (1, 2, 2)
LATENT_CHANNELS = 16
# Height and width must be divisible by the VAE stride times the spatial patch.
_SPATIAL_MULTIPLE = VAE_SPATIAL_STRIDE * PATCH_SIZE[1]


def _nearest_valid(value: int, multiple: int, offset: int = 0) -> list[int]:
    """Nearest values of the form ``multiple * k + offset`` (k >= 0 where possible) to ``value``.

    Returns one value, or two when ``value`` lies exactly halfway between them.
    """
    smallest = offset if offset >= 1 else multiple
    if value <= smallest:
        return [smallest]
    below = (value - offset) // multiple * multiple + offset
    above = below + multiple
    if value - below < above - value:
        return [below]
    if value - below > above - value:
        return [above]
    return [below, above]


@dataclasses.dataclass(frozen=True)
class VideoGeometry:
    """A video's size in pixels and what it becomes in latents and tokens.

    Attributes:
        frames: pixel frames; must be 4k+1 (e.g. 81).
        height: pixel height; a multiple of 16 (e.g. 720, 1088).
        width: pixel width; a multiple of 16 (e.g. 1280).
    """

    frames: int
    height: int
    width: int

    def __post_init__(self) -> None:
        problems = []
        suggestion = {"frames": self.frames, "height": self.height, "width": self.width}
        if not isinstance(self.frames, int) or self.frames < 1 or (self.frames - 1) % 4:
            near = _nearest_valid(int(self.frames), VAE_TEMPORAL_STRIDE, offset=1)
            suggestion["frames"] = near[-1]
            problems.append(
                f"frames={self.frames} is not 4k+1 (the VAE packs 4 frames per latent after the "
                f"first); nearest valid: {' or '.join(map(str, near))}"
            )
        for name in ("height", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value % _SPATIAL_MULTIPLE:
                near = _nearest_valid(int(value), _SPATIAL_MULTIPLE)
                suggestion[name] = near[-1]
                problems.append(
                    f"{name}={value} is not a positive multiple of {_SPATIAL_MULTIPLE} (VAE x8, "
                    f"patch x2); nearest valid: {' or '.join(map(str, near))}"
                )
        if problems:
            raise ValueError(
                f"invalid video geometry {self.width}x{self.height} (WxH), {self.frames} frames: "
                + "; ".join(problems)
                + f"; use {suggestion['width']}x{suggestion['height']}, "
                f"{suggestion['frames']} frames"
            )

    @property
    def latent_frames(self) -> int:
        """Latent frames: (frames - 1) // 4 + 1."""
        return (self.frames - 1) // VAE_TEMPORAL_STRIDE + 1

    @property
    def latent_height(self) -> int:
        """Latent height: height / 8."""
        return self.height // VAE_SPATIAL_STRIDE

    @property
    def latent_width(self) -> int:
        """Latent width: width / 8."""
        return self.width // VAE_SPATIAL_STRIDE

    @property
    def token_grid(self) -> tuple[int, int, int]:
        """(F, Hp, Wp): latent frames and latent height/width after the (1, 2, 2) patch."""
        return (
            self.latent_frames // PATCH_SIZE[0],
            self.latent_height // PATCH_SIZE[1],
            self.latent_width // PATCH_SIZE[2],
        )

    @property
    def tokens_per_frame(self) -> int:
        """S = Hp * Wp."""
        _, hp, wp = self.token_grid
        return hp * wp

    @property
    def tokens(self) -> int:
        """N = F * Hp * Wp, the self-attention sequence length."""
        f, hp, wp = self.token_grid
        return f * hp * wp

    def latent_shape(self, channels: int = LATENT_CHANNELS) -> tuple[int, int, int, int]:
        """Shape of one video's latents, without batch: [C, F_lat, H/8, W/8]."""
        return (channels, self.latent_frames, self.latent_height, self.latent_width)
