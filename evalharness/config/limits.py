"""Thresholds and limits as finite numbers: the one rule for every setting and command-line flag
that holds one (a gate threshold, a time limit, a search budget or step).

NaN compares false with everything, so a NaN threshold would pass every gate and a NaN limit
would switch its check off; an infinite threshold or limit means nothing either; and no
threshold or limit here is negative (a PSNR of uint8 frames is >= 0, a speedup > 0).
"""

from __future__ import annotations

import math
from typing import Any


def limit_problem(key: str, value: Any, *, positive: bool = False) -> str | None:
    """What is wrong with a threshold or limit, or None when it can be used.

    Args:
        key: the setting or flag, named in the message (``gate.min_psnr_db``, ``--min-speedup``).
        value: its value; None (unset) is fine.
        positive: whether 0 is refused too (a time budget, a grid step).

    Returns:
        A message naming ``key``, its value and what to give instead, or None.
    """
    if value is None:
        return None
    bound = "> 0" if positive else ">= 0"
    wanted = f"give a finite number {bound}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key}={value!r} is not a number; {wanted}"
    if math.isnan(value):
        return f"{key}=nan is not a number (NaN compares false, so no check would hold); {wanted}"
    if math.isinf(value):
        return f"{key}={value} is infinite; {wanted}"
    if value < 0:
        return f"{key}={value:g} is negative; {wanted}"
    if positive and value == 0:
        return f"{key}=0 must be > 0"
    return None
