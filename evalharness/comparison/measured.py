"""The comparison stage of a run: the arms compiled once on the first pair, then every pair
timed and measured. A single pair writes into the run folder and the run's tracker; a suite's
pairs each get ``pairs/<pair>/`` and a child run.

With ``reuse_dense_timing=true`` every pair's dense arms, timings included, come from the
dense-arm cache of an earlier process, so a sweep times only its sparse arms; only when every
pair's entry is timed and every process of a multi-host run holds them all (otherwise every arm
is timed afresh, side by side, and the log says why).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from evalharness.arms import PreparedArm, rebind_arm
from evalharness.comparison.pair import (
    Comparison,
    PairInputs,
    PairOutput,
    compare_pair,
    records_routing,
)
from evalharness.comparison.progress import pair_phase
from evalharness.config import Pair
from evalharness.evidence import (
    DenseArms,
    load_dense_arms,
    parent_metrics,
    run_folder,
    suite_metrics,
)
from evalharness.metric_names import RunMetrics
from evalharness.tracking import closed_on_error, multihost, run_tags

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measured:
    """What the comparison measured.

    Attributes:
        metrics: the run's metrics: one pair's plus its ``suite_metrics``, or a suite's
            ``parent_metrics``.
        per_pair: each pair's metrics, in pair order.
    """

    metrics: RunMetrics
    per_pair: tuple[RunMetrics, ...]


def measure_pairs(comparison: Comparison, inputs: list[PairInputs]) -> Measured:
    """The arms compiled once on the first pair's inputs, then each pair (``inputs``, in pair
    order) compared on the same compiled loops."""
    pairs = [item.pair for item in inputs]
    for pair in pairs:  # a damaged dense-cache entry is set aside now, before anything compiles
        comparison.cache.check(comparison.dense_key(pair))
    cached = reused_dense_arms(comparison, pairs)
    comparison.progress.phase("compile arms")
    compiled = prepare_arms(comparison, inputs[0], dense=cached is None)
    per_pair = []
    for item in inputs:
        comparison.progress.phase(pair_phase(item.pair, len(pairs)))
        arms = compiled
        if item is not inputs[0]:
            arms = {k: _rebound(comparison, k, arm, item) for k, arm in compiled.items()}
        reused = None if cached is None else cached[item.pair.index]
        per_pair.append(_run_pair(comparison, item, arms, len(pairs), reused))
    comparison.progress.phase("summary")
    if len(pairs) == 1:
        return Measured(per_pair[0].with_values(suite_metrics(per_pair)), tuple(per_pair))
    return Measured(parent_metrics(per_pair), tuple(per_pair))


def prepare_arms(
    comparison: Comparison, inputs: PairInputs, *, dense: bool = True
) -> dict[str, PreparedArm]:
    """Every timed arm compiled and run once on the first pair, in the order the timing rounds
    take them (only the sparse arm when ``dense`` is False: the dense timings are reused)."""
    attention = comparison.plan.attention
    arms = {}
    if dense:
        arms["dense"] = comparison.prepare_arm("dense", attention.dense, inputs)
    # A sparse arm that records its routing does it in its untimed warm-up run only.
    sparse = records_routing(comparison) or attention.sparse
    arms["sparse"] = comparison.prepare_arm("sparse", sparse, inputs)
    if dense and comparison.cfg.noise_floor:
        # Timed like the dense arm: it is the second dense control the headline speedup uses.
        arms["noise_floor"] = comparison.prepare_arm("noise_floor", attention.noise_floor, inputs)
    return arms


def _rebound(
    comparison: Comparison, label: str, arm: PreparedArm, inputs: PairInputs
) -> PreparedArm:
    """The compiled arm bound to another pair's inputs, its warm-up timed as the arm's."""
    with comparison.timed(f"{label} warm-up"):
        return rebind_arm(arm, inputs.args, on_event=comparison.progress.event)


def reused_dense_arms(comparison: Comparison, pairs: list[Pair]) -> dict[int, DenseArms] | None:
    """Every pair's cached dense arms, timings included, by pair index; None when not asked or
    when a pair (the log says which) or another process misses."""
    if not comparison.cfg.reuse_dense_timing:
        return None
    found: dict[int, DenseArms] | None = {}
    for pair in pairs:
        arms = load_dense_arms(comparison.cache, comparison.dense_key(pair))
        if arms is None or arms.dense.times is None:
            log.warning(
                f"reuse_dense_timing=true, but the dense-arm cache has no timed entry for "
                f"{pair.name} (prompt {pair.prompt!r}, seed {pair.seed}): timing every arm "
                "afresh, side by side"
            )
            found = None
            break
        found[pair.index] = arms
    # Every process must run the same arms: reuse only when every host's cache holds them.
    if not multihost.everywhere(found is not None):
        if found is not None:
            log.warning(
                "reuse_dense_timing=true, but another process's dense-arm cache misses: timing "
                "every arm afresh, side by side"
            )
        return None
    log.warning(
        "reuse_dense_timing=true: dense medians come from the cache (an earlier process); the "
        "speedup compares timings taken under different loads, and the gate refuses a speedup "
        "threshold on it"
    )
    return found


def _run_pair(
    comparison: Comparison,
    inputs: PairInputs,
    arms: dict[str, PreparedArm],
    count: int,
    cached: DenseArms | None,
) -> RunMetrics:
    """One pair: in the run itself for a single pair, else in its own folder and child run."""
    if count == 1:
        out = PairOutput(comparison.run_dir, comparison.tracker)
        return compare_pair(comparison, inputs, arms, out, cached)
    pair, cfg = inputs.pair, comparison.cfg
    folder = comparison.run_dir / "pairs" / pair.name
    folder.mkdir(parents=True)
    child = comparison.tracker.child(f"{comparison.run_dir.name}/{pair.name}")
    out = PairOutput(folder, child, f"{pair.name}: ")
    with closed_on_error(child):
        child.log_params({"prompt": pair.prompt, "seed": pair.seed, "pair": pair.index})
        child.set_tags({**run_tags(cfg), "pair": pair.name})
        measured = compare_pair(comparison, inputs, arms, out, cached)
        metrics = measured.with_values(prompt=pair.prompt, seed=pair.seed, pair=pair.name)
        run_folder.write_metrics(folder, metrics)
        child.log_metrics(metrics.numeric())
        exclude = () if cfg.logger.log_videos else run_folder.VIDEO_PATTERNS
        child.log_artifacts(folder, exclude=exclude)
    child.finish("FINISHED")
    return metrics
