"""The comparison stage of a run: the arms compiled once on the first pair, then every pair
timed and measured. A single pair writes into the run folder and the run's tracker; a suite's
pairs each get ``pairs/<pair>/`` and a child run.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalharness.arms import PreparedArm, rebind_arm
from evalharness.comparison.dense_reuse import reused_dense_arms
from evalharness.comparison.pair import Comparison, PairInputs, PairOutput, compare_pair
from evalharness.comparison.progress import pair_phase
from evalharness.evidence import DenseArms, parent_metrics, run_folder, suite_metrics
from evalharness.metric_names import RunMetrics
from evalharness.tracking import closed_on_error, run_tags


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
            event = comparison.progress.event
            arms = {k: rebind_arm(arm, item.args, on_event=event) for k, arm in compiled.items()}
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
    arms["sparse"] = comparison.prepare_arm("sparse", attention.sparse, inputs)
    if dense and comparison.cfg.noise_floor:
        # Timed like the dense arm: it is the second dense control the headline speedup uses.
        arms["noise_floor"] = comparison.prepare_arm("noise_floor", attention.noise_floor, inputs)
    return arms


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
