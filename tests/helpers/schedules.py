"""The schedules shipped in ``conf/schedule``, read the way tests compare against them."""

from __future__ import annotations

import yaml

from kernels.policy.schedule import SparsitySchedule
from tests.helpers.paths import SCHEDULE_DIR

SCHEDULE_NAMES = ("dense", "conservative", "balanced", "aggressive", "svg_720p")


def load_schedule(name: str) -> SparsitySchedule:
    """The schedule of ``conf/schedule/<name>.yaml``."""
    with open(SCHEDULE_DIR / f"{name}.yaml") as f:
        return SparsitySchedule.from_mapping(yaml.safe_load(f))
