"""Weights that ship inside the package, so a preset runs with no checkpoint to fetch.

``model=tiny`` is the tiny Wan trained here on moving shapes (``python -m models.training --out
DIR --preset full``; the command, settings and code version are in the folder's
``training.json``), stored in the diffusers layout in float16 and read through the same loader as
a real Wan folder.
"""

from __future__ import annotations

from pathlib import Path

_WEIGHTS = Path(__file__).resolve().parent / "weights"

# The presets whose weights ship, each in models/weights/<preset>/.
SHIPPED_PRESETS: tuple[str, ...] = ("tiny",)


def shipped_checkpoint(preset: str) -> Path | None:
    """The packaged checkpoint folder of ``preset``; None when the preset ships no weights."""
    return _WEIGHTS / preset if preset in SHIPPED_PRESETS else None
