"""How the Pallas TPU kernel holds q, k, v and its output in HBM: in place or heads-leading.

The kernel's grid runs over (batch * heads, query tiles, visits), and each step DMAs one head's
[block, head_dim] tile. In place, that tile is a head_dim-wide column block of [batch, tokens, heads
* head_dim], the layout q, k, v arrive in (a free reshape), so nothing is copied. Neither layout
pads the tokens to whole tiles: the last tile of a ragged sequence reads past its end, and the
kernel masks those rows (``kernels.executors.pallas_tpu``). A column block must be a multiple of 128
lanes (or the whole row), so head_dim 64 with several heads is copied heads-leading instead, [batch
* heads, tokens, head_dim], and the output copied back. The two hold the same values; in place saves
two copies of q, k, v and the output per call, heads-leading gives the kernel contiguous tiles
rather than rows strided by heads * head_dim. On a TPU v5e at Wan 1.3B's 720p shapes the kernel
itself took the same time either way (110.0 and 109.9 ms in a profile of the block), and the whole
sparse block was 5.3 ms faster in place (docs/benchmarks.md, "Measured on a TPU v5e");
``evalharness.bench.step_parts`` times and profiles both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

LANES = 128  # a TPU vreg's lanes: a column block's width must be a multiple of this


def reads_in_place(heads: int, head_dim: int) -> bool:
    """Whether one head's tile is a lane-aligned column block of [tokens, heads * head_dim]."""
    return heads == 1 or head_dim % LANES == 0


def resolve_in_place(heads: int, head_dim: int, in_place: bool | None) -> bool:
    """The operand layout a call runs: ``in_place`` as asked, or ``reads_in_place`` for None.

    Raises:
        ValueError: in place asked for heads whose column blocks are not lane-aligned.
    """
    if in_place is None:
        return reads_in_place(heads, head_dim)
    if in_place and not reads_in_place(heads, head_dim):
        raise ValueError(
            f"in_place=True needs head_dim a multiple of {LANES} (or one head); got {heads} "
            f"heads x {head_dim}: use in_place=None or False"
        )
    return bool(in_place)


def to_kernel_operand(x: jax.Array, in_place: bool) -> jax.Array:
    """[batch, tokens, heads, d] as [batch, tokens, heads * d] (``in_place``) or
    [batch * heads, tokens, d]."""
    b, n, h, d = x.shape
    if in_place:
        return x.reshape(b, n, h * d)
    return jnp.transpose(x, (0, 2, 1, 3)).reshape(b * h, n, d)


def operand_block_index(bh, tile, heads: int, in_place: bool) -> tuple:
    """The block of a grid step over (batch * heads, ..., row ``tile``) in a kernel operand
    (``to_kernel_operand``'s layout), for a ``BlockSpec`` of (None, rows, head_dim).

    In place, head h of batch b is the h-th head_dim-wide column block of [b, tokens, :];
    heads-leading, it is row ``bh`` of [batch * heads, tokens, head_dim]. ``lax.div``/``rem``:
    ``bh`` >= 0, and Python's floor division would lower a sign op Mosaic rejects.
    """
    return (lax.div(bh, heads), tile, lax.rem(bh, heads)) if in_place else (bh, tile, 0)


def from_kernel_operand(out: jax.Array, shape: tuple[int, ...], in_place: bool) -> jax.Array:
    """The kernel's output (``to_kernel_operand``'s layout) back to [batch, tokens, heads, d]
    (``shape``)."""
    b, n, h, d = shape
    if in_place:
        return out.reshape(b, n, h, d)
    return jnp.transpose(out.reshape(b, h, n, d), (0, 2, 1, 3))
