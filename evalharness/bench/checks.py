"""Acceptance checks of the kernel benchmark, pure functions of its tables: on XLA B3 within 5%
of the ideal 1/density over B0; on a GPU (Triton) B3 within 10% of it, B0 within 1.25x of cuDNN's
dense flash attention, and B3 over cuDNN at 0.8 of the ideal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalharness.bench.timing import cpu_time_measures_compute
from kernels.plans.tiles import VARIANTS
from kernels.policy.schedule import SPARSE_VARIANTS

GPU_IDEAL_VS_B0 = 0.90
GPU_B0_OVER_CUDNN = 1.25
GPU_IDEAL_VS_CUDNN = 0.8


def _by_variant(table: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {row["variant"]: row for row in table}


def gpu_checks(
    table: Sequence[Mapping[str, Any]], key: str = "median_ms"
) -> dict[str, bool | None]:
    """The pallas_gpu checks on a kernel table's ``key`` times: b0 / b3 >= 0.90 / density, b0
    <= 1.25 * cudnn, cudnn / b3 >= 0.8 / density (density: the b3 row's "mask_density").

    Returns:
        The three checks; one whose rows are missing (cuDNN dropped off a GPU, say) is None, so
        it shows as not evaluated rather than vanishing or passing.
    """
    by = _by_variant(table)
    checks: dict[str, bool | None] = {}
    ideal = 1.0 / by["b3"]["mask_density"] if "b3" in by else None
    checks["b3_at_least_0.90_of_ideal_vs_b0"] = (
        by["b0"][key] / by["b3"][key] >= GPU_IDEAL_VS_B0 * ideal
        if ideal is not None and "b0" in by
        else None
    )
    checks["b0_within_1.25x_of_cudnn"] = (
        by["b0"][key] <= GPU_B0_OVER_CUDNN * by["cudnn"][key]
        if {"b0", "cudnn"} <= by.keys()
        else None
    )
    checks["b3_vs_cudnn_at_least_0.8_of_ideal"] = (
        by["cudnn"][key] / by["b3"][key] >= GPU_IDEAL_VS_CUDNN * ideal
        if ideal is not None and "cudnn" in by
        else None
    )
    return checks


def _ordering_checks(by: Mapping[str, Mapping[str, Any]], key: str, suffix: str) -> dict:
    """B3 fastest of B1-B3 and B2 not slower than B1 (what each refinement should buy)."""
    if not set(SPARSE_VARIANTS) <= by.keys():
        return {}
    return {
        "b3_fastest_of_b1_b3" + suffix: by["b3"][key] <= min(by["b1"][key], by["b2"][key]),
        "b2_not_slower_than_b1" + suffix: by["b2"][key] <= by["b1"][key],
    }


def acceptance_checks(
    table: Sequence[Mapping[str, Any]],
    memory: Sequence[Mapping[str, Any]],
    backend: str = "xla",
) -> dict[str, bool | None]:
    """The checks the benchmark reports for ``backend``: check name -> True/False (None: not
    evaluated).

    On "xla" and "pallas_tpu": B3 at 0.95 of ideal, the orderings, B0 not slower than the XLA
    einsum (when it ran), on wall-clock medians and, on the CPU backend, again on process CPU
    medians (less disturbed by other processes on a shared machine). On "pallas_gpu":
    ``gpu_checks`` and the orderings on wall-clock medians only (the host's CPU time measures
    waiting). With ``memory`` rows:
    compiled peak of b0-b3 under 4 GiB. ``table`` and ``memory`` may be empty (part skipped).
    """
    by = _by_variant(table)
    checks: dict[str, bool | None] = {}
    if backend == "pallas_gpu":
        if table:
            checks.update(gpu_checks(table))
            checks.update(_ordering_checks(by, "median_ms", ""))
    else:
        medians = [("median_ms", "")]
        if cpu_time_measures_compute():
            medians.append(("cpu_median_ms", "_cpu"))
        for key, suffix in medians:
            if set(VARIANTS) <= by.keys():
                speedup = by["b0"][key] / by["b3"][key]
                ideal = 1.0 / by["b3"]["mask_density"]
                checks["b3_at_least_0.95_of_ideal" + suffix] = speedup >= 0.95 * ideal
                checks.update(_ordering_checks(by, key, suffix))
            if {"b0", "dot_product_attention"} <= by.keys():
                checks["b0_not_slower_than_dpa" + suffix] = (
                    by["b0"][key] <= by["dot_product_attention"][key]
                )
    if memory:
        checks["blocksparse_peak_under_4gib"] = all(
            r["peak_gib"] < 4 for r in memory if r["variant"] in VARIANTS
        )
    return checks
