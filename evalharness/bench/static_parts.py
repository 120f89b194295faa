"""The sparse attention call's parts for a static-mask schedule (``sta``, ``radial``), timed by
``python -m evalharness.bench.step_parts``.

A static mask routes nothing: its sparse call is the layout change into the mask's token order
(STA's tiles; Radial stays frame-major), the band kernel on the mask's tile plan, and the change
back. The parts are named as a routed schedule's are (``layout in``, ``band kernel``, ``layout
out``), so one table and one summary serve both; a mask without a layout change has no layout
parts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax

from kernels.masks.sta import from_tile_order, to_tile_order
from kernels.policy.static_policy import StaticMaskPolicy


def static_attention_fns(
    policy: StaticMaskPolicy, q: jax.Array, k: jax.Array, v: jax.Array, *, step, layer
) -> dict[str, Callable[[], jax.Array]]:
    """Dense and sparse attention alone, and the static sparse call's parts, each a jitted call
    on its own inputs.

    Args:
        policy: the static schedule's policy (its layout, plan and dense control).
        q: [batch, tokens, heads, head_dim], frame-major.
        k: [batch, tokens, heads, head_dim].
        v: [batch, tokens, heads, head_dim].
        step: the sparse cell's step (a traced-able int32 scalar).
        layer: the sparse cell's layer.

    Returns:
        Part name -> a function of no arguments that runs it: ``dense attention``, ``sparse
        attention``, ``band kernel``, and with a layout ``layout in`` and ``layout out``.
    """
    layout = policy.layout
    moved = (q, k, v) if layout is None else tuple(to_tile_order(x, layout) for x in (q, k, v))
    jitted = {
        "dense attention": (jax.jit(lambda q, k, v: policy.dense_attend(q, k, v)), (q, k, v)),
        "sparse attention": (
            jax.jit(lambda q, k, v: policy.sparse_branch(q, k, v, step=step, layer=layer)),
            (q, k, v),
        ),
        "band kernel": (jax.jit(policy.execute_band), moved),
    }
    if layout is not None:
        jitted["layout in"] = (
            jax.jit(lambda q, k, v: [to_tile_order(a, layout) for a in (q, k, v)]),
            (q, k, v),
        )
        jitted["layout out"] = (jax.jit(lambda o: from_tile_order(o, layout)), (q,))
    return {name: functools.partial(fn, *args) for name, (fn, args) in jitted.items()}
