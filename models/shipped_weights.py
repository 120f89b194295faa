"""Weights that ship inside the package, so a preset runs with no checkpoint to fetch.

``model=tiny`` is the tiny Wan trained here on moving shapes (``python -m models.training --out
DIR --preset full``; the command, settings and code version are in the folder's
``training.json``), stored in the diffusers layout in float16 and read through the same loader as
a real Wan folder.
"""

from __future__ import annotations

from pathlib import Path

_WEIGHTS = Path(__file__).resolve().parent / "weights"

# Preset name -> its folder under models/weights/.
_SHIPPED: dict[str, str] = {"tiny": "tiny"}


def shipped_checkpoint(preset: str) -> Path | None:
    """The packaged checkpoint folder of ``preset``; None when the preset ships no weights."""
    folder = _SHIPPED.get(preset)
    return None if folder is None else _WEIGHTS / folder
