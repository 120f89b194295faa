"""The head exchange of sequence parallelism, written from one device's view inside ``shard_map``.

Sequence-sharded: a device holds [B, N / P, H, D] (a contiguous run of frame-major tokens, every
head). Head-sharded: a device holds [B, N, H_pad / P, D] (every token of its heads). One tiled
``lax.all_to_all`` turns one into the other exactly (data movement only).

Head counts that do not divide by the device count P are padded with zero heads up to the next
multiple of P (``padded_heads``) and the padding is dropped after the return exchange. A zero head
attends uniformly to zero values, so it yields zeros and touches no real head; the price is
(H_pad - H) / H_pad wasted attention work, e.g. 4 heads on 8 devices do half their attention on
padding, 12 (Wan 1.3B) on 8 a quarter, 40 (Wan 14B) on 8 none.

The "before_exchange" placement permutes temporal heads while the tokens are still sequence-sharded.
A token's temporal-layout position can belong to any device, so each device gathers the whole
sequence (``lax.all_gather``) and keeps its own slice of the permuted order: P - 1 times the data of
an all-to-all, which is why it is the slower placement.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def padded_heads(heads: int, devices: int) -> int:
    """Heads rounded up to a multiple of ``devices`` (the head-sharded side's total)."""
    return -(-heads // devices) * devices


def sequence_to_heads(x: jax.Array, axis_name: str, devices: int) -> jax.Array:
    """[B, N / P, H, D] sequence-sharded → [B, N, H_pad / P, D] head-sharded (zero-padded heads).

    Args:
        x: this device's tokens, every head.
        axis_name: the mesh axis.
        devices: P, the axis size.

    Returns:
        Every token of this device's heads (heads ``i * H_pad / P`` onwards on device ``i``).
    """
    heads = x.shape[2]
    pad = padded_heads(heads, devices) - heads
    if pad:
        x = jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0)))
    return lax.all_to_all(x, axis_name, split_axis=2, concat_axis=1, tiled=True)


def heads_to_sequence(x: jax.Array, axis_name: str, heads: int) -> jax.Array:
    """Inverse of ``sequence_to_heads``: [B, N, H_pad / P, D] → [B, N / P, H, D].

    Args:
        x: every token of this device's heads.
        axis_name: the mesh axis.
        heads: H, the real heads (padding beyond them is dropped).

    Returns:
        This device's tokens, every real head.
    """
    out = lax.all_to_all(x, axis_name, split_axis=1, concat_axis=2, tiled=True)
    return out[:, :, :heads]


def local_head_flags(flags: jax.Array, axis_name: str, devices: int) -> jax.Array:
    """This device's slice of per-(batch, head) flags after ``sequence_to_heads``.

    Every device holds the same routing (it is computed identically everywhere), so each head's
    flag travels with it by slicing the heads this device received; padded heads are False.

    Args:
        flags: bool [B, H], replicated.
        axis_name: the mesh axis.
        devices: P.

    Returns:
        bool [B, H_pad / P].
    """
    heads = flags.shape[1]
    total = padded_heads(heads, devices)
    flags = jnp.pad(flags, ((0, 0), (0, total - heads)))
    per_device = total // devices
    start = lax.axis_index(axis_name) * per_device
    return lax.dynamic_slice_in_dim(flags, start, per_device, axis=1)


def permute_sharded(x: jax.Array, index: np.ndarray, flags: jax.Array, axis_name: str) -> jax.Array:
    """Per (batch, head): ``global[index]`` where ``flags``, else unchanged, on sharded tokens.

    Used by the "before_exchange" placement: gathers the whole sequence from every device, then
    keeps this device's slice of the permuted order.

    Args:
        x: [B, N / P, H, D], this device's run of tokens.
        index: int32 [N] static permutation (``x_permuted = x_global[index]``).
        flags: bool [B, H]; True moves the head.
        axis_name: the mesh axis.

    Returns:
        [B, N / P, H, D]: this device's positions of each head's own layout.
    """
    local = x.shape[1]
    full = lax.all_gather(x, axis_name, axis=1, tiled=True)  # [B, N, H, D]
    start = lax.axis_index(axis_name) * local
    mine = lax.dynamic_slice_in_dim(jnp.asarray(index), start, local)
    moved = jnp.take(full, mine, axis=1)
    return jnp.where(flags[:, None, :, None], moved, x)


def exchange_bytes(
    batch: int,
    tokens: int,
    heads: int,
    head_dim: int,
    itemsize: int,
    devices: int,
    placement: str,
    samples: int = 64,
) -> dict[str, int]:
    """Bytes one sparse attention call sends between devices (all devices together), computed.

    - all-to-all of a tensor of T bytes: each device keeps 1 / P of its shard, so (P - 1) / P · T
      crosses links; four of them (q, k, v out, and the output back), on padded heads.
    - all-gather (before_exchange): every shard goes to the P - 1 other devices, (P - 1) · T; four
      of them (q, k, v before the exchange, the output after it).
    - routing (both placements): psum (all-reduce, 2 (P - 1) · size in a ring) of the gathered
      [B, R, H, D] float32 query rows and of the three [B, H, R, D] float32 partial outputs and
      their [B, H, R] sums, and the pmax (also an all-reduce) of three [B, H, R] row maxima.

    Args:
        batch: B.
        tokens: N.
        heads: H (before padding).
        head_dim: D.
        itemsize: bytes per element of q/k/v.
        devices: P.
        placement: "head_local" or "before_exchange".
        samples: R routing rows.

    Returns:
        {"all_to_all", "all_gather", "routing", "total"} in bytes.
    """
    p = devices
    padded = padded_heads(heads, p)
    tensor = batch * tokens * padded * head_dim * itemsize
    all_to_all = 4 * tensor * (p - 1) // p
    gather = 0
    if placement == "before_exchange":
        gather = 4 * (p - 1) * batch * tokens * heads * head_dim * itemsize
    rows = batch * samples * heads * head_dim * 4
    stats = batch * heads * samples * 4
    routing = 2 * (p - 1) * (4 * rows + 6 * stats)
    return {
        "all_to_all": all_to_all,
        "all_gather": gather,
        "routing": routing,
        "total": all_to_all + gather + routing,
    }
