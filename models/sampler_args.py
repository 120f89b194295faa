"""Validation of the two numbers every flow-matching sampler is built from."""

from __future__ import annotations

import math

import numpy as np


def check_sampler_args(num_steps: int, shift: float) -> tuple[int, float]:
    """Checks a sampler's step count and flow shift.

    Args:
        num_steps: number of denoising steps, an int >= 1 (bools refused).
        shift: flow shift, a finite float > 0.

    Returns:
        ``(int(num_steps), float(shift))``.

    Raises:
        ValueError: naming the bad value and what is accepted.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer):
        raise ValueError(f"num_steps must be an int >= 1, got {num_steps!r}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be an int >= 1, got {num_steps}")
    if (
        isinstance(shift, bool)
        or not isinstance(shift, int | float | np.integer | np.floating)
        or not math.isfinite(shift)
        or shift <= 0
    ):
        raise ValueError(f"shift must be a finite float > 0 (Wan uses 3.0 or 5.0), got {shift!r}")
    return int(num_steps), float(shift)
