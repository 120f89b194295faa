"""Admission: every check before a weight is read or a folder created. Preflight (time and
memory), the run's sizing on a device target (memory table, time, Pallas budgets, lowering),
the compile check of each arm's attention, and the dry run (alone, or a sweep's table of them).
"""

from evalharness.admission.compile_check import EXPORT_PLATFORMS
from evalharness.admission.decision import Admission, admit
from evalharness.admission.dry_run_report import (
    checkpoint_optional,
    dry_run,
    dry_run_table,
    plan_dry_run,
)
from evalharness.admission.mosaic_fix import compile_refusal
from evalharness.admission.output_check import (
    check_compile_cache,
    check_output_folders,
    check_writable,
    io_hint,
)
from evalharness.admission.run_timing import (
    arm_executors,
    measured_job,
    reusable_seconds,
    samples_per_call,
)
from evalharness.admission.sizing import estimate_run_time

__all__ = [
    "Admission",
    "arm_executors",
    "EXPORT_PLATFORMS",
    "admit",
    "check_compile_cache",
    "check_output_folders",
    "check_writable",
    "compile_refusal",
    "io_hint",
    "measured_job",
    "plan_dry_run",
    "checkpoint_optional",
    "dry_run",
    "dry_run_table",
    "estimate_run_time",
    "reusable_seconds",
    "samples_per_call",
]
