"""The comparison: one (prompt, seed) pair's arms timed side by side with its quality and
files, a suite's run-level report, sweeps' tables, and progress over the phases.
"""

from evalharness.comparison import suite_report
from evalharness.comparison.dense_reuse import reused_dense_arms
from evalharness.comparison.pair import Comparison, PairInputs, PairOutput, compare_pair
from evalharness.comparison.progress import Progress
from evalharness.comparison.sweep import SWEEP_JOB_TAG, append_summary, failed_jobs, tag_sweep_job

__all__ = [
    "Comparison",
    "PairInputs",
    "PairOutput",
    "Progress",
    "SWEEP_JOB_TAG",
    "append_summary",
    "compare_pair",
    "failed_jobs",
    "reused_dense_arms",
    "suite_report",
    "tag_sweep_job",
]
