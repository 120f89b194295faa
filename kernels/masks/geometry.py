"""Video token geometry: latent frames F and a token grid Hp x Wp per frame.

Inside the Wan transformer a video of F latent frames becomes N = F * S tokens, S = Hp * Wp per
frame, flattened frame-major as (F, Hp, Wp). This module holds only that arithmetic and depends on
nothing else in the project. Named resolutions are pixel sizes; the code that knows the VAE and
the patch turns them into token geometries.
"""

from __future__ import annotations

import dataclasses


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
