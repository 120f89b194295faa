"""Dense-timing reuse (``reuse_dense_timing=true``): every pair's dense arms, timings included,
taken from the dense-arm cache of an earlier process, so a sweep times only its sparse arms.

Only when every pair's entry is timed and every process of a multi-host run holds them all;
otherwise every arm is timed afresh, side by side, and the log says why.
"""

from __future__ import annotations

import logging

from evalharness.comparison.pair import Comparison
from evalharness.config import Pair
from evalharness.evidence import DenseArms, load_dense_arms
from evalharness.tracking import multihost

log = logging.getLogger(__name__)


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
                "reuse_dense_timing=true, but the dense-arm cache has no timed entry for %s "
                "(prompt %r, seed %d): timing every arm afresh, side by side",
                pair.name,
                pair.prompt,
                pair.seed,
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
