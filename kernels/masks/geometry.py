"""Video token geometry: latent frames F and a token grid Hp x Wp per frame.

Inside the Wan transformer a video of F latent frames becomes N = F * S tokens, S = Hp * Wp per
frame, flattened frame-major as (F, Hp, Wp). This module holds only that arithmetic and the Wan
resolution presets (81 pixel frames); it depends on nothing else in the project.
"""

from __future__ import annotations

import dataclasses

# Wan 2.1 presets at 81 pixel frames: (latent frames, token rows, token columns). Latent frames are
# (81 - 1) / 4 + 1 = 21; a token covers 16 x 16 pixels (VAE stride 8, patch 2).
RESOLUTION_PRESETS: dict[str, tuple[int, int, int]] = {
    "480p": (21, 30, 52),  # 832 x 480 pixels -> 1,560 tokens per frame
    "720p": (21, 45, 80),  # 1280 x 720 -> 3,600
    "1080p": (21, 68, 120),  # 1920 x 1088 -> 8,160
    "1440p": (21, 90, 160),  # 2560 x 1440 -> 14,400
}


@dataclasses.dataclass(frozen=True)
class TokenGeometry:
    """Token geometry of one video.

    Attributes:
        frames: latent frames F.
        height: token rows Hp (latent height / 2).
        width: token columns Wp (latent width / 2).
    """

    frames: int
    height: int
    width: int

    def __post_init__(self) -> None:
        for name in ("frames", "height", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TokenGeometry.{name}={value!r}: expected a positive int")

    @property
    def tokens_per_frame(self) -> int:
        """S = Hp * Wp."""
        return self.height * self.width

    @property
    def tokens(self) -> int:
        """N = F * S."""
        return self.frames * self.tokens_per_frame

    @classmethod
    def from_resolution(cls, name: str) -> TokenGeometry:
        """The Wan preset geometry at 81 pixel frames.

        Args:
            name: one of ``RESOLUTION_PRESETS`` ("480p", "720p", "1080p", "1440p").

        Returns:
            The token geometry, e.g. 720p -> TokenGeometry(21, 45, 80), 75,600 tokens.
        """
        if name not in RESOLUTION_PRESETS:
            raise ValueError(
                f"resolution={name!r} is not a preset; use one of {sorted(RESOLUTION_PRESETS)}"
            )
        return cls(*RESOLUTION_PRESETS[name])
