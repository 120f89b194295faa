"""Token geometries of the resolution presets in ``conf/resolution``, for tests."""

from __future__ import annotations

from evalharness.config.resolutions import load_resolution
from kernels.masks.geometry import TokenGeometry


def preset_tokens(name: str) -> TokenGeometry:
    """The token geometry of a preset, e.g. ``"720p"`` -> TokenGeometry(21, 45, 80)."""
    return load_resolution(name).tokens
