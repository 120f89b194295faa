"""Input checks, matmul precision and program-cache lookup shared by the Pallas kernels.

Both kernels (``kernels.executors.pallas_tpu``, ``kernels.executors.pallas_gpu``) take q, k, v as
[batch, tokens, heads, head_dim] and a tile plan, support float32 and bfloat16 with head_dim 64 or
128, refuse to compile eagerly off their platform (an interpreted run is only ever asked for) and
cache one jitted program per plan and input signature. What differs, their tile rules, stays in
each kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from kernels.executors.pallas_tpu_visits import VARIANTS, plan_block_sizes
from kernels.masks.protocols import TilePlanLike

SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))


def matmul_precision(dtype: jnp.dtype) -> jax.lax.Precision:
    """The precision a Pallas kernel states for its matmuls, never inherited from the caller's
    ``jax_default_matmul_precision``: full for float32 operands (Mosaic takes it for float32
    only), the default for bfloat16, whose products are exact in float32 either way."""
    return jax.lax.Precision.HIGHEST if dtype == jnp.float32 else jax.lax.Precision.DEFAULT


def check_kernel_inputs(
    q: jax.Array, k: jax.Array, v: jax.Array, plan: TilePlanLike, variant: str
) -> None:
    """Raises ValueError, naming the problem and the fix, for inputs no Pallas kernel supports.

    Args:
        q: [batch, tokens, heads, head_dim] queries.
        k: keys, q's shape and dtype.
        v: values, q's shape and dtype.
        plan: the tile plan (``tokens``, ``block_sizes``, ``full_count``, optional ``variant``).
        variant: lower-case "b0".."b3".
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    plan_variant = getattr(plan, "variant", None)
    if plan_variant is not None and str(plan_variant).lower() != variant:
        raise ValueError(
            f"plan was built for variant {plan_variant!r} but variant {variant!r} was requested; "
            f"build the plan with kernels.plans.tiles.build_plan(mask, block_sizes, {variant!r})"
        )
    if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            "q, k, v must share the shape [batch, tokens, heads, head_dim]; got "
            f"q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if jnp.dtype(q.dtype) not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported; use float32 or bfloat16")
    head_dim = q.shape[-1]
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {head_dim} is not supported; use one of {SUPPORTED_HEAD_DIMS}")
    if int(plan.tokens) != q.shape[1]:
        raise ValueError(f"plan was built for {plan.tokens} tokens but q has {q.shape[1]}")
    block_q = plan_block_sizes(plan)[0]
    num_q_tiles = int(np.size(plan.full_count))
    if num_q_tiles * block_q < q.shape[1]:
        raise ValueError(
            f"plan has {num_q_tiles} query tiles of {block_q}, fewer than {q.shape[1]} tokens; "
            f"it needs at least {math.ceil(q.shape[1] / block_q)}"
        )


def check_platform(q: jax.Array, interpret: bool, platform: str, export_platform: str) -> None:
    """Refuses an eager, compiled call off ``platform``; traced calls pass (``jax.export``).

    A tracer does not say which platform it is lowered for, so a traced call is let through:
    exporting for ``export_platform`` lowers the kernel on any machine, and jitting it for the
    wrong platform fails later in Pallas's own lowering.

    Raises:
        ValueError: naming ``interpret=True`` and the export route.
    """
    if interpret or jax.default_backend() == platform or isinstance(q, jax.core.Tracer):
        return
    raise ValueError(
        f"this Pallas kernel needs a {platform.upper()} (backend is {jax.default_backend()!r}); "
        "pass interpret=True to run it on this backend, or trace it (jax.export with "
        f"platforms=['{export_platform}']) to lower it for one"
    )


def program_builder(build: Callable, plan: TilePlanLike) -> Callable:
    """``build`` (an ``functools.lru_cache`` keyed by the plan) or, for a plan that holds arrays
    by value and cannot be hashed, the uncached function underneath."""
    try:
        hash(plan)
    except TypeError:
        return build.__wrapped__
    return build


__all__ = [
    "SUPPORTED_DTYPES",
    "SUPPORTED_HEAD_DIMS",
    "check_kernel_inputs",
    "check_platform",
    "program_builder",
]
