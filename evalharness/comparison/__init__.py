"""The comparison: the arms compiled once and every (prompt, seed) pair timed side by side with
its quality and files, then the run's conclusion (gate, results, tracker); sweeps' tables, and
progress over the phases.
"""

from evalharness.comparison.conclusion import Outcome, conclude, finish_phases, write_time_plan
from evalharness.comparison.measured import Measured, measure_pairs, prepare_arms
from evalharness.comparison.pair import Comparison, PairInputs
from evalharness.comparison.progress import Progress, run_phases
from evalharness.comparison.sweep import (
    SWEEP_JOB_TAG,
    append_summary,
    failed_jobs,
    record_unfinished_job,
    tag_sweep_job,
)

__all__ = [
    "Comparison",
    "Measured",
    "Outcome",
    "PairInputs",
    "Progress",
    "SWEEP_JOB_TAG",
    "append_summary",
    "conclude",
    "failed_jobs",
    "finish_phases",
    "measure_pairs",
    "prepare_arms",
    "run_phases",
    "record_unfinished_job",
    "tag_sweep_job",
    "write_time_plan",
]
