"""A dry-run sweep's table: one line per job, the planned fit and time beside the seed's figures.

``python -m evalharness -m dry_run=true experiment=seed_720p,seed_1080p,seed_1440p`` plans each
job (``evalharness.admission.dry_run_report``), and each job's line lands in the sweep's summary
file; the multirun's callback (``evalharness.comparison.sweep.SweepSummary``) prints them as
one table: the verdict (fits, does not fit, over ``max_minutes``), the peak per device, the
estimated minutes, and for a job in the seed's setting (14B on ``tpu-v6e-8`` at 720p / 1080p /
1440p) the seed's measured loop times and speedup beside our estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalharness import exit_codes
from evalharness.config import EvalConfig
from evalharness.estimates import in_seed_setting, rates_for, seed_prediction, seed_row
from evalharness.formatting import markdown_table
from models.config import WanTransformerConfig

if TYPE_CHECKING:  # sizing imports this module's caller; the type is only named here
    from evalharness.admission.sizing import RunSizing

VERDICTS = {
    exit_codes.OK: "fits",
    exit_codes.REFUSED: "does not fit",
    exit_codes.OVER_TIME: "fits, over max_minutes",
}
# The seed's figures a row carries (``evalharness.estimates.seed_comparison``), by column.
_SEED_KEYS = ("dense_s", "sparse_s", "speedup")
COLUMNS = (
    ("job", "sweep_job", "{}"),
    ("model", "model", "{}"),
    ("resolution", "resolution", "{}"),
    ("schedule", "schedule", "{}"),
    ("target", "target", "{}"),
    ("verdict", "verdict", "{}"),
    ("peak GiB / device", "peak", "{}"),
    ("peak from", "peak_from", "{}"),
    ("our model's peak GiB", "model_peak", "{}"),
    ("est. minutes", "minutes", "{:,.1f}"),
    ("max_minutes", "max_minutes", "{:g}"),
    ("dense loop s seed / ours", "dense_s", "{}"),
    ("sparse loop s seed / ours", "sparse_s", "{}"),
    ("speedup seed / ours", "speedup", "{}"),
    ("planned in s", "plan_s", "{:,.0f}"),
)


def summary_row(
    cfg: EvalConfig, tcfg: WanTransformerConfig, sizing: RunSizing, code: int, plan_s: float
) -> dict[str, str | float]:
    """One job's line: what was planned, the verdict, where the peak comes from (the chip's
    compiler or our model, with our model's beside a compiled one), the loop times beside the
    seed's, and how long the plan took.

    Args:
        cfg: the job's config, resolved for the target.
        tcfg: the transformer architecture.
        sizing: the job's ``RunSizing`` on the target.
        code: the dry run's exit code.
        plan_s: the dry run's seconds on this machine.
    """
    memory, model, gib = sizing.memory, sizing.model_memory, 2**30
    row: dict[str, str | float] = {
        "model": cfg.model.name,
        "resolution": cfg.resolution.name,
        "schedule": cfg.schedule.name,
        "target": sizing.target.name,
        "verdict": VERDICTS.get(code, f"exit {code}"),
        "peak": f"{memory.peak_bytes / gib:.2f} / {memory.device_bytes / gib:.2f}",
        "peak_from": sizing.compiled_by or "our model",
        "model_peak": f"{model.peak_bytes / gib:.2f}" if model else "-",
        "plan_s": plan_s,
        "minutes": sizing.timing.total_minutes,
        "max_minutes": cfg.max_minutes,
    }
    ours = seed_prediction(sizing.timing, sizing.sparse, tcfg, rates_for(sizing.target))
    ours = {key: ours[key] for key in _SEED_KEYS}
    if in_seed_setting(cfg.model.name, sizing.target.name, cfg.resolution.name):
        cells = seed_row(cfg.resolution.name, ours)
        return row | {key: cells[key] for key in _SEED_KEYS}
    return row | {key: f"- / {value:,.2f}" for key, value in ours.items()}


def dry_run_table(rows: Sequence[dict[str, Any]]) -> str:
    """The sweep's dry runs as a Markdown table, job by job."""
    ordered = sorted(rows, key=lambda row: row.get("sweep_job", -1))
    return markdown_table(ordered, COLUMNS)
