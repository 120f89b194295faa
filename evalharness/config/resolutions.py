"""Resolution presets by name, read from the Hydra group ``conf/resolution`` (the only place a
preset's pixel size is written down), in the geometries each side of the project works in: the
pixel config, the model's :class:`~models.video_geometry.VideoGeometry` (latents) and the
kernels' :class:`~kernels.masks.geometry.TokenGeometry` (tokens).
"""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from evalharness.config.compose import CONF_DIR
from evalharness.config.overrides import group_options
from evalharness.config.schemas import ResolutionConfig
from kernels.masks.geometry import TokenGeometry
from models.video_geometry import VideoGeometry


@dataclasses.dataclass(frozen=True)
class Resolution:
    """One preset in the three geometries.

    Attributes:
        config: the pixel config as the harness composes it (name, frames, height, width, ...).
        video: pixels, latents and the token grid as the model sees them.
        tokens: the token geometry the kernels plan tiles for.
    """

    config: ResolutionConfig
    video: VideoGeometry
    tokens: TokenGeometry


def token_geometry(video: VideoGeometry) -> TokenGeometry:
    """The transformer's token grid of a video (latent frames x latent H/2 x latent W/2)."""
    return TokenGeometry(*video.token_grid)


def resolution_names() -> list[str]:
    """Names of the presets (one ``conf/resolution/<name>.yaml`` each), sorted."""
    return group_options("resolution")


def load_resolution(name: str) -> Resolution:
    """Loads the preset ``conf/resolution/<name>.yaml``, validated against
    :class:`ResolutionConfig`.

    Args:
        name: a preset name, e.g. ``"720p"`` (21 x 45 x 80 = 75,600 tokens at 81 frames).

    Returns:
        The preset as pixel config, video geometry and token geometry.

    Raises:
        ValueError: for an unknown name (the message lists the available ones), or a preset whose
            size the model cannot take.
    """
    names = resolution_names()
    if name not in names:
        raise ValueError(f"unknown resolution {name!r}; available: {', '.join(names)}")
    raw = OmegaConf.load(CONF_DIR / "resolution" / f"{name}.yaml")
    # ``defaults`` names the Hydra schema; the schema is applied here directly instead.
    raw.pop("defaults", None)
    merged = OmegaConf.merge(OmegaConf.structured(ResolutionConfig), raw)
    config: ResolutionConfig = OmegaConf.to_object(merged)
    return Resolution(config=config, video=config.video, tokens=token_geometry(config.video))
