"""The one attention dispatch: q, k, v + mask (or plan) -> out, for every executor and backend.

Numerical contract (the model's ``attend`` contract, docs/architecture.md): q, k, v and out are
[batch, tokens, heads, head_dim]; out = softmax(q k^T / sqrt(head_dim), masked) v per batch and
head; query rows whose mask keeps no key return zeros. The mask is given in the tokens' own order
(a temporal head's tokens must already be in the temporal layout, see ``kernels.masks.layouts``).

Variants:
- "reference": dense masked jnp, the oracle (O(N^2) memory, small N only).
- dense peers (mask must be None; ``kernels.executors.dense_controls``): "dot_product_attention"
  (``jax.nn.dot_product_attention`` XLA einsum, O(N^2) memory: CPU and small N only), "splash"
  (JAX's TPU splash attention, full mask) and "cudnn" (cuDNN flash attention, bfloat16).
- "xla_flash": our dense attention shaped for a CPU's matmul (online softmax over query chunks and
  large key blocks, ``kernels.executors.xla_flash``), the CPU's dense control; pure JAX, so any
  platform runs it; mask must be None.
- "b0" dense tiles, "b1" exact sparse, "b2" full/partial split, "b3" tile-rounded mask (see
  ``kernels.plans.tiles``), on backend "xla" (pure JAX), "pallas_tpu" (``kernels.executors.pallas_tpu``)
  or "pallas_gpu" (``kernels.executors.pallas_gpu``, Triton).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from kernels.executors.dense_controls import cudnn_attention, splash_attention
from kernels.executors.kernel_inputs import SUPPORTED_DTYPES
from kernels.executors.reference import reference_attention
from kernels.executors.xla_blocksparse import blocksparse_attention
from kernels.executors.xla_flash import flash_attention
from kernels.masks.band import PaddingMask
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes, same_tiles
from kernels.plans.tiles import TilePlan, build_plan
from kernels.registry import EXECUTORS, TILED_BACKENDS, executor_names

# Dense executors from outside the project: no mask, no tile plan.
DENSE_PEERS = executor_names(tiled=False, ours=False)
ALL_VARIANTS = tuple(EXECUTORS)
BACKENDS = TILED_BACKENDS

# Head dims the block-sparse XLA path accepts; the Pallas kernel checks its own (64, 128).
_XLA_HEAD_DIM_MULTIPLE = 8
_XLA_MAX_HEAD_DIM = 256


def _validate_qkv(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(
                f"{name} has shape {x.shape}; expected [batch, tokens, heads, head_dim]"
            )
        if jnp.dtype(x.dtype) not in SUPPORTED_DTYPES:
            raise ValueError(f"{name}.dtype={x.dtype}; supported: float32, bfloat16")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v shapes differ: {q.shape}, {k.shape}, {v.shape}; they must match")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")


def _pallas_backend(backend: str):
    """The Pallas kernel module of ``backend`` (imported on first use)."""
    try:
        if backend == "pallas_gpu":
            from kernels.executors import pallas_gpu as module
        else:
            from kernels.executors import pallas_tpu as module
    except ImportError as error:
        raise ValueError(
            f"backend={backend!r} needs kernels/executors/{backend}.py, which is not available "
            f"({error}); use backend='xla'"
        ) from error
    return module


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """How a backend runs a kernel, apart from its tiles (``BlockSizes``, the compute sub-tile
    included); each backend reads only its own fields.

    Attributes:
        interpret: Pallas interpret mode (the Pallas kernels, ours and splash, run on a CPU);
            ignored by "xla".
        vmem_limit_bytes: scoped VMEM limit of b0-b3 on "pallas_tpu"; None keeps Mosaic's.
        num_warps: warps per program of b0-b3 on "pallas_gpu"; None picks by tile and head_dim
            (``kernels.executors.pallas_gpu_budget.default_num_warps``).
        num_stages: software-pipelining stages of b0-b3 on "pallas_gpu"; None keeps the
            kernel's default.
        in_place: how b0-b3 on "pallas_tpu" hold their operands: in place (True) or copied
            heads-leading (False); None: in place where head_dim is a multiple of 128
            (``kernels.executors.pallas_tpu_operands``). Benchmarks set it to time both.
    """

    interpret: bool = False
    vmem_limit_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    in_place: bool | None = None


# The options a kernel gets when none are given: compiled (not interpreted), each kernel's defaults.
DEFAULT_KERNEL_OPTIONS = KernelOptions()

Kernel = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def make_attention(
    tokens: int,
    mask=None,
    *,
    executor: str | None = "b2",
    block_sizes: BlockSizes | None = None,
    backend: str = "xla",
    options: KernelOptions = DEFAULT_KERNEL_OPTIONS,
    rounding_tolerance: float | None = 0.01,
) -> Kernel:
    """Scaled dot-product attention for ``tokens``-long sequences, built once: the request is
    checked and the tile plan built here, so the returned kernel only runs.

    Args:
        tokens: the sequence length N every call has.
        mask: None (dense), a mask from ``kernels.masks.band`` over ``tokens`` tokens, or a
            prebuilt ``TilePlan`` (then ``executor`` must match it or be None and ``block_sizes``
            must be None or equal; its tiles are not revalidated: whoever built the plan
            validated them).
        executor: one of ``ALL_VARIANTS`` (a sparse variant b0-b3, a dense peer, or the
            reference); "b0" ignores the mask (dense); ``DENSE_PEERS`` and
            "xla_flash" refuse one.
        block_sizes: tiles for b0-b3 (default ``auto_block_sizes(tokens, backend)``), for
            "splash" (default ``kernels.executors.dense_controls.splash_tiles``) and the (query
            chunk, key block) of "xla_flash" (default ``kernels.executors.xla_flash.flash_blocks``).
        backend: "xla", "pallas_tpu" or "pallas_gpu" (b0-b3 only; "xla_flash" is XLA anyway).
        options: the backend's own settings (``KernelOptions``).
        rounding_tolerance: b3 only, see ``kernels.plans.rounding.round_to_tiles``.

    Returns:
        ``kernel(q, k, v) -> out``: q, k, v [batch, tokens, heads, head_dim], float32 or
        bfloat16 (unscaled); out in q's dtype.

    Raises:
        ValueError: an unknown executor or backend, a mask over another length, a mask given to a
            dense control, or tiles that do not suit ``tokens`` on ``backend``.
    """
    executor, mask, plan = _checked_request(mask, executor, block_sizes, backend, tokens)
    if executor == "reference":
        return _checked(tokens, lambda q, k, v: reference_attention(q, k, v, mask))
    if not EXECUTORS[executor].tiled:
        if mask is not None:
            raise ValueError(
                f"executor={executor!r} is a dense control (a dense peer); pass mask=None, or use "
                "b1-b3 for masked attention"
            )
        return _checked(tokens, _dense_peer(executor, block_sizes, options))
    if plan is None:
        # Whoever builds a plan validates its tiles; a prebuilt plan was validated by its builder
        # (e.g. the attention policy, once per run), so it is not rechecked here.
        if block_sizes is None:
            block_sizes = auto_block_sizes(tokens, backend)
        block_sizes.validate(tokens, backend)
        plan = build_plan(
            PaddingMask(tokens) if mask is None else mask,
            block_sizes,
            executor,
            rounding_tolerance if executor == "b3" else 0.01,
        )
    return _checked(
        tokens, functools.partial(_run_plan, plan=plan, backend=backend, options=options)
    )


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask=None,
    *,
    executor: str | None = "b2",
    block_sizes: BlockSizes | None = None,
    backend: str = "xla",
    options: KernelOptions = DEFAULT_KERNEL_OPTIONS,
    rounding_tolerance: float | None = 0.01,
) -> jax.Array:
    """One call of :func:`make_attention`'s kernel, built for ``q``'s length (the arguments are
    :func:`make_attention`'s)."""
    _validate_qkv(q, k, v)
    kernel = make_attention(
        q.shape[1],
        mask,
        executor=executor,
        block_sizes=block_sizes,
        backend=backend,
        options=options,
        rounding_tolerance=rounding_tolerance,
    )
    return kernel(q, k, v)


def _checked(tokens: int, run: Kernel) -> Kernel:
    """``run`` behind the checks of q, k and v every call needs (shapes, dtypes, length)."""

    def kernel(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        _validate_qkv(q, k, v)
        if q.shape[1] != tokens:
            raise ValueError(
                f"q has {q.shape[1]} tokens; this kernel was built for {tokens}: build one for "
                "this sequence's length"
            )
        return run(q, k, v)

    return kernel


def _dense_peer(executor: str, block_sizes: BlockSizes | None, options: KernelOptions) -> Kernel:
    """One of the untiled dense executors (``DENSE_PEERS`` and "xla_flash") as a kernel."""
    if executor == "xla_flash":
        return functools.partial(flash_attention, block_sizes=block_sizes)
    if executor == "splash":
        return functools.partial(
            splash_attention,
            block_sizes=block_sizes,
            block_kv_compute=None if block_sizes is None else block_sizes.block_kv_compute,
            interpret=options.interpret,
        )
    if executor == "cudnn":
        return cudnn_attention
    return functools.partial(jax.nn.dot_product_attention, implementation="xla")


def _run_plan(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    plan: TilePlan,
    backend: str,
    options: KernelOptions,
) -> jax.Array:
    """A tile plan (b0-b3) executed on ``backend``, each backend given its own options."""
    if backend == "pallas_gpu":
        return _pallas_backend(backend).pallas_gpu_blocksparse_attention(
            q,
            k,
            v,
            plan,
            variant=plan.variant,
            interpret=options.interpret,
            num_warps=options.num_warps,
            num_stages=options.num_stages,
        )
    if backend == "pallas_tpu":
        return _pallas_backend(backend).pallas_blocksparse_attention(
            q,
            k,
            v,
            plan,
            variant=plan.variant,
            interpret=options.interpret,
            block_kv_compute=plan.block_sizes.block_kv_compute,
            vmem_limit_bytes=options.vmem_limit_bytes,
            in_place=options.in_place,
        )
    d = q.shape[3]
    if d % _XLA_HEAD_DIM_MULTIPLE or d > _XLA_MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim={d} is not supported by the XLA block-sparse path; use a multiple of "
            f"{_XLA_HEAD_DIM_MULTIPLE} up to {_XLA_MAX_HEAD_DIM} (e.g. 64 or 128)"
        )
    return blocksparse_attention(q, k, v, plan)


def _checked_request(
    mask: Any, executor: str | None, block_sizes: BlockSizes | None, backend: str, n: int
) -> tuple[str, Any, TilePlan | None]:
    """The call's (executor, logical mask, prebuilt plan or None), each checked against the others
    and against the ``n``-token sequence."""
    plan = mask if isinstance(mask, TilePlan) else None
    if plan is not None:
        executor = plan.variant if executor is None else executor
        if executor != plan.variant:
            raise ValueError(f"executor={executor!r} but the TilePlan is for {plan.variant!r}")
        if block_sizes is not None and not same_tiles(block_sizes, plan.block_sizes):
            raise ValueError(f"block_sizes={block_sizes} but the plan uses {plan.block_sizes}")
        mask = plan.logical_mask
    if executor not in ALL_VARIANTS:
        raise ValueError(f"executor={executor!r}; use one of {ALL_VARIANTS}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; use one of {BACKENDS}")
    if mask is not None and getattr(mask, "tokens", None) != n:
        raise ValueError(
            f"the mask covers {getattr(mask, 'tokens', None)} tokens but q has {n}; build the "
            "mask for this sequence's geometry"
        )
    return executor, mask, plan
