"""What one device's attention call holds beyond q, k, v and its output, per arm.

The executors' temporaries are their ``ExecutorSpec``'s; routing (``kernels.policy.routing`` /
``kernels.parallel.routing``), the temporal-layout copies
(``kernels.masks.layouts.to_head_layouts``) and the sequence-parallel head exchange
(``kernels.parallel.exchange``) are computed here from the code that allocates them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
from jax.typing import DTypeLike

from kernels.parallel import padded_heads
from models.config import WanTransformerConfig

F32 = 4

TempBytes = int | Callable[..., int]


@dataclass(frozen=True)
class AttentionShape:
    """One device's attention call, on the head-sharded side of the exchange.

    Attributes:
        batch: B (2 with classifier-free guidance).
        heads: heads on this device (padded heads / P; all heads on one device).
        tokens: N, every token (attention needs them all).
        head_dim: D.
        dtype_bytes: bytes per element of q, k, v.
    """

    batch: int
    heads: int
    tokens: int
    head_dim: int
    dtype_bytes: int

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one [B, N, heads, D] tensor (q, k, v or out)."""
        return self.batch * self.tokens * self.heads * self.head_dim * self.dtype_bytes

    def abstract(self, dtype: DTypeLike) -> jax.ShapeDtypeStruct:
        """The abstract q (= k = v) of the call, [B, N, heads, D] in ``dtype`` (of
        ``dtype_bytes``), for compiling an executor without allocating it."""
        return jax.ShapeDtypeStruct((self.batch, self.tokens, self.heads, self.head_dim), dtype)


def _resolve(temp: TempBytes, shape: AttentionShape) -> int:
    return int(temp(**dataclasses.asdict(shape)) if callable(temp) else temp)


@dataclass(frozen=True)
class ExecutorSpec:
    """What one arm's attention holds beyond q, k, v and its output.

    Attributes:
        name: the executor, for the table and the refusal (e.g. "b0", "dot_product_attention").
        temp_bytes: the executor's temporaries: bytes, or ``f(*, batch, heads, tokens, head_dim,
            dtype_bytes) -> int`` evaluated at the device's ``AttentionShape`` (e.g. a
            ``functools.partial`` of ``dense_executor_temp_bytes``, or ``compiled_temp_bytes``).
        routed: the sparse arm: its dense steps and layers beside its sparse cells, and (as
            the next two say) routing and a layout change in its sparse cells.
        routing_samples: R, the routed query rows; 0 for a static mask (``sta``, ``radial``),
            which routes nothing and holds no routing buffers.
        layout_change: the sparse cells move tokens to another layout and back (routed
            temporal heads, STA's tile order); False for a mask run in frame-major order
            (Radial).
        dense_name: the executor of a routed arm's dense steps and layers.
        dense_temp_bytes: its temporaries, as ``temp_bytes`` (the two sides of a ``lax.cond``
            are never live together, so the larger counts).
        fuses_layout: the executor is XLA code that absorbs the layout gather into its own
            operand copies (the xla backend's block-sparse executors: XLA:CPU's plan grows by
            0.2-0.5 of a q-sized tensor, not four), so one copy is counted instead of four.
        attend: the arm's single-device ``attend(q, k, v, *, step, layer)`` (the sparse arm's
            whole policy) when it compiles on this host: ``memory_estimate`` then compiles it
            into the blocks (on a device's [B, N, H / P, D] share), and the compiler's extra bytes
            replace ``temp_bytes``, routing and layout copies. None: the bytes above.
    """

    name: str
    temp_bytes: TempBytes = 0
    routed: bool = False
    routing_samples: int = 64
    layout_change: bool = True
    dense_name: str | None = None
    dense_temp_bytes: TempBytes = 0
    fuses_layout: bool = False
    attend: Callable[..., Any] | None = None

    def executor_bytes(self, shape: AttentionShape) -> int:
        """The larger of the executor's and (routed arms) the dense steps' temporaries."""
        temp = _resolve(self.temp_bytes, shape)
        return max(temp, _resolve(self.dense_temp_bytes, shape)) if self.routed else temp


def attention_shape(
    tcfg: WanTransformerConfig, *, batch: int, tokens: int, devices: int, dtype_bytes: int
) -> AttentionShape:
    """The per-device attention call: every token of padded heads / P heads."""
    heads = padded_heads(tcfg.num_attention_heads, devices) // devices
    return AttentionShape(batch, heads, tokens, tcfg.attention_head_dim, dtype_bytes)


def routing_buffer_bytes(
    *,
    batch: int,
    tokens: int,
    heads: int,
    head_dim: int,
    samples: int,
    devices: int,
) -> int:
    """Routing's buffers on one device (``kernels.policy.routing.route_rows`` and its sharded twin).

    Each device scores the R sampled rows against its own N / P keys: float32 copies of its k and
    v laid out per head (materialised even when already float32), the [B, R, H, D] gathered rows,
    the [B, H, R, N / P] float32 scores plus two more such buffers for the three softmaxes (dense,
    spatial, temporal; each one's exponentials are freed after its product), the two [R, N / P]
    keep masks and three [B, H, R, D] outputs, all float32. XLA:CPU's plan for ``route_rows`` is
    80-100% of this (tests/evalharness/estimates/test_memory_estimate.py).

    Args:
        batch: B.
        tokens: N.
        heads: H, every head (routing runs before the exchange).
        head_dim: D.
        samples: R.
        devices: P.
    """
    local = -(-tokens // devices)
    kv_copies = 2 * batch * local * heads * head_dim * F32
    rows = batch * samples * heads * head_dim * F32
    scores = batch * heads * samples * local * F32
    return kv_copies + 4 * rows + 3 * scores + 2 * samples * local


def layout_copy_bytes(shape: AttentionShape, *, devices: int, placement: str) -> int:
    """Temporal-layout copies of the sparse arm (``AttentionPolicy.sparse_attention``).

    "head_local" (and one device): q, k, v selected into each head's layout and the executor's
    output before it returns to frame-major order, 4 x [B, N, heads, D] (the transpose and the
    select of ``to_head_layouts`` fuse). "before_exchange": each device also gathers the whole
    [B, N, H, D] sequence of q, k and v to build its slice of the permuted order (3 full tensors
    counted live, an upper bound) plus 4 moved [B, N / P, H, D] slices.
    """
    if devices == 1 or placement == "head_local":
        return 4 * shape.tensor_bytes
    if placement != "before_exchange":
        raise ValueError(f"placement={placement!r}; use 'head_local' or 'before_exchange'")
    full = shape.tensor_bytes * devices  # every head of every token
    return 3 * full + 4 * full // devices


def exchange_buffer_bytes(shape: AttentionShape, *, devices: int, heads: int) -> int:
    """Buffers of the sequence-parallel head exchange (``kernels.parallel.exchange``).

    After the all-to-all a device holds q, k, v and the executor's output head-sharded,
    4 x [B, N, H_pad / P, D], beside the sequence-sharded q, k, v it came from (counted as live
    together, an upper bound); heads that do not divide by P are first zero-padded, 3 more
    [B, N / P, H_pad, D] copies. Nothing on one device.
    """
    if devices == 1:
        return 0
    padded = shape.heads * devices
    pad_copies = 3 * shape.tensor_bytes if padded != heads else 0
    return 4 * shape.tensor_bytes + pad_copies
