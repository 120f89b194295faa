"""Our time estimate beside the seed's measurements (``evalharness.estimates.seed_measurements``)
for a run in the seed's setting: :func:`seed_prediction` reads the seed's figures off a
``TimeEstimate``, :func:`seed_table` prints both with the difference. The dry run prints the table
for a 14B run on ``tpu-v6e-8`` at a seed resolution, ``python -m evalharness.bench.seed_calibration``
for all three (``experiment=seed_*``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalharness.estimates.seed_measurements import (
    SEED_ATTENTION_SHARE,
    SEED_DENSE_LOOP_S,
    SEED_KERNEL_MS,
    SEED_SPARSE_LOOP_S,
    SEED_SPEEDUP,
)
from evalharness.estimates.workload import SparseWork, TimeEstimate, TimeRates
from evalharness.formatting import markdown_table
from models.config import WanTransformerConfig

SEED_MODEL, SEED_TARGET = "wan2.1-t2v-14b", "tpu-v6e-8"
SEED_RESOLUTIONS = tuple(SEED_DENSE_LOOP_S)
# What the calibration test holds the estimate to: speedups within 15%, per-call times within 20%.
SPEEDUP_BAND, CALL_BAND = 0.15, 0.20
TITLES = {
    "res": "res",
    "dense_call_ms": "dense call ms seed / ours",
    "b3_call_ms": "B3 call ms seed / ours",
    "dense_s": "dense loop s seed / ours",
    "sparse_s": "sparse loop s seed / ours",
    "speedup": "speedup seed / ours",
    "share": "attention share seed / ours",
}
CONTRADICTION = (
    "The seed's attention shares (its Table 1) disagree with its own kernel and end-to-end tables "
    "(40 x 78.70 ms is 82% of its 3.84 s dense step at 720p); the estimate follows the kernel and "
    "end-to-end tables."
)


def in_seed_setting(model: str, target: str, resolution: str) -> bool:
    """Whether the seed measured this model, target and resolution."""
    return model == SEED_MODEL and target == SEED_TARGET and resolution in SEED_RESOLUTIONS


def seed_prediction(
    timing: TimeEstimate, sparse: SparseWork | None, tcfg: WanTransformerConfig, rates: TimeRates
) -> dict[str, float]:
    """The seed's figures as ``timing`` predicts them: dense and B3 call ms (one call of the
    run's shape on one chip), dense and sparse loop seconds, speedup, attention share of a dense
    step. Without a sparse arm the sparse figures are NaN."""
    attention = timing.seconds["self-attention"]["dense"]
    dense_call = attention / tcfg.num_layers  # one layer's attention (the seed's joint call)
    nan = float("nan")
    b3_call, sparse_s = nan, nan
    if sparse is not None and "sparse" in timing.runs:
        b3_call = dense_call * sparse.executed / rates.variant_efficiency.get(sparse.variant, 1.0)
        sparse_s = timing.loop_seconds("sparse")
    dense = timing.loop_seconds("dense")
    return {
        "dense_call_ms": 1e3 * dense_call,
        "b3_call_ms": 1e3 * b3_call,
        "dense_s": dense,
        "sparse_s": sparse_s,
        "speedup": dense / sparse_s,
        "share": attention / timing.step_seconds["dense"],
    }


def seed_figures(resolution: str) -> dict[str, float]:
    """The seed's measurements at ``resolution`` (the kernel table at 720p only)."""
    seed = {
        "dense_s": SEED_DENSE_LOOP_S[resolution],
        "sparse_s": SEED_SPARSE_LOOP_S[resolution],
        "speedup": SEED_SPEEDUP[resolution],
        "share": SEED_ATTENTION_SHARE[resolution],
    }
    if resolution == "720p":
        seed |= {"dense_call_ms": SEED_KERNEL_MS["b0"], "b3_call_ms": SEED_KERNEL_MS["b3"]}
    return seed


def seed_row(resolution: str, ours: Mapping[str, float]) -> dict[str, str]:
    """One table row: ``seed / ours (difference)`` for each figure."""
    seed = seed_figures(resolution)
    row = {"res": resolution}
    for key, value in ours.items():
        measured = seed.get(key)
        share = key == "share"
        shown = f"{100 * value:.1f}%" if share else f"{value:,.2f}"
        if measured is None:
            row[key] = shown
            continue
        before = f"{100 * measured:.1f}%" if share else f"{measured:,.2f}"
        row[key] = f"{before} / {shown} ({value / measured - 1:+.0%})"
    return row


def seed_table(rows: Sequence[Mapping[str, str]]) -> str:
    """The rows as a Markdown table."""
    return markdown_table(list(rows), [(t, k, "{}") for k, t in TITLES.items()])
