"""FLOPs of a function's convolutions and matrix products, counted from its traced program.

Reading the jaxpr gives the same count on every backend before anything compiles (XLA's
``Lowered.cost_analysis`` exists only outside the PJRT plugins: CUDA's returns none, and XLA's GPU
compiler counts no FLOPs for the VAE's convolutions). Two FLOPs per multiply-add, a convolution's
implicit padding taps included (Wan's causal convolutions pad explicitly); elementwise work is left
out: under 1% of a convolutional decoder (tested against XLA's CPU count).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.extend import core as jex_core


def matmul_flops(fn: Callable[..., Any], *args: Any) -> float:
    """FLOPs of ``fn(*args)``'s convolutions and ``dot_general`` products.

    Args:
        fn: a JAX-traceable function.
        *args: its arguments, concrete or ``jax.ShapeDtypeStruct`` (pytrees of them allowed).

    Returns:
        2 x the multiply-adds of every convolution and matrix product, through nested programs
        (``jit``, ``remat``, custom derivatives); a ``scan`` counts its body ``length`` times, a
        ``cond`` its costliest branch.

    Raises:
        ValueError: the program has a ``while`` loop, whose trip count is unknown when traced.
    """
    return _jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def _jaxpr_flops(jaxpr: jex_core.Jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "conv_general_dilated":
            total += _conv_flops(eqn)
        elif name == "dot_general":
            total += _dot_flops(eqn)
        elif name == "scan":
            total += eqn.params["length"] * _jaxpr_flops(eqn.params["jaxpr"].jaxpr)
        elif name == "cond":
            total += max(_jaxpr_flops(b.jaxpr) for b in eqn.params["branches"])
        elif name == "while":
            raise ValueError(
                "matmul_flops: the program has a while loop, whose trip count is unknown when "
                "traced; count its body and multiply by the trip count instead"
            )
        else:
            total += sum(_jaxpr_flops(sub) for sub in _sub_jaxprs(eqn.params))
    return total


def _sub_jaxprs(params: dict[str, Any]) -> list[jex_core.Jaxpr]:
    """The programs nested in an equation's parameters (jit, remat, custom_jvp/vjp bodies)."""
    nested = [v for v in params.values() if isinstance(v, jex_core.ClosedJaxpr | jex_core.Jaxpr)]
    return [v.jaxpr if isinstance(v, jex_core.ClosedJaxpr) else v for v in nested]


def _conv_flops(eqn: Any) -> float:
    out = eqn.outvars[0].aval.shape
    kernel = eqn.invars[1].aval.shape
    dn = eqn.params["dimension_numbers"]
    in_features = kernel[dn.rhs_spec[1]]  # per group: the kernel's input-feature dimension
    window = math.prod(kernel[d] for d in dn.rhs_spec[2:])
    return 2.0 * math.prod(out) * in_features * window


def _dot_flops(eqn: Any) -> float:
    lhs = eqn.invars[0].aval.shape
    (contracting, _), _ = eqn.params["dimension_numbers"]
    out = eqn.outvars[0].aval.shape
    return 2.0 * math.prod(out) * math.prod(lhs[d] for d in contracting)
