"""The ``allowed(q, k)`` predicate a Pallas kernel evaluates inside a masked tile visit.

Both Pallas kernels (TPU and GPU) mask a visited tile by evaluating a predicate on token indices
computed from iotas, so nothing mask-shaped is read from memory. Which predicate depends on the
variant (``kernels.executors.pallas_tpu_visits.PARTIAL_PREDICATE``): b1/b2 evaluate the plan's
mask (band + sink + padding for ``kernels.masks.band`` masks); b0 and b3 visit exactly the tiles
they mean to keep, so their masked tiles only need the padding test, the cheapest there is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from kernels.executors.pallas_tpu_visits import PARTIAL_PREDICATE
from kernels.masks.protocols import TilePlanLike


def padding_only(tokens: int, q, k):
    """Predicate of b0/b3 masked visits: only padded keys (``k >= tokens``) are dropped.

    Args:
        tokens: real sequence length.
        q: query token indices (unused; any shape broadcastable with ``k``).
        k: key token indices.

    Returns:
        bool array of ``k``'s shape.
    """
    del q
    return k < tokens


def partial_predicate(plan: TilePlanLike, variant: str, tokens: int) -> Callable:
    """The ``allowed(q, k)`` predicate masked visits of ``variant`` evaluate.

    Args:
        plan: the tile plan (its ``mask`` must have ``allowed`` for b1/b2).
        variant: "b0", "b1", "b2" or "b3".
        tokens: the sequence length of q.

    Returns:
        ``allowed(q_index, k_index) -> bool`` on broadcastable int32 index arrays.

    Raises:
        ValueError: b1/b2 with a plan mask that has no ``allowed``, or one built for another
            sequence length.
    """
    if PARTIAL_PREDICATE[variant] == "padding":
        return functools.partial(padding_only, tokens)
    mask = plan.mask
    if not callable(getattr(mask, "allowed", None)):
        raise ValueError(
            f"variant {variant} masks boundary tiles with plan.mask.allowed(q, k), but plan.mask "
            f"is {type(mask).__name__}; build the plan from a kernels.masks.band mask"
        )
    if int(getattr(mask, "tokens", tokens)) != tokens:
        raise ValueError(f"plan.mask is for {mask.tokens} tokens but q has {tokens}")
    return mask.allowed
