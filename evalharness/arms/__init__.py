"""One arm of a comparison: its denoising loop compiled once, timed warm and interleaved with
the other arms in one process, and decoded.
"""

from evalharness.arms.arm import (
    ArmResult,
    PreparedArm,
    decode_arm,
    prepare_arm,
    rebind_arm,
    time_arms_interleaved,
)
from evalharness.arms.timing import (
    RunTimes,
    check_warm_runs,
    fastest_control,
    time_interleaved,
    timed_window_tags,
    timing_metrics,
)

__all__ = [
    "ArmResult",
    "PreparedArm",
    "RunTimes",
    "check_warm_runs",
    "decode_arm",
    "fastest_control",
    "prepare_arm",
    "rebind_arm",
    "time_arms_interleaved",
    "time_interleaved",
    "timed_window_tags",
    "timing_metrics",
]
