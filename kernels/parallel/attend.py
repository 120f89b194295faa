"""Sequence-parallel self-attention: routing before the head exchange, head-local permutation.

The Wan transformer's activations [B, N, dim] stay sharded along the tokens on the mesh axis
``"seq"`` (``shard_tokens``, applied by the transformer from the patch embedding to the unpatchify),
so projections, cross-attention and the FFN run on each device's own N / P tokens. Self-attention
needs every token, so each call (inside ``jax.shard_map``):

1. routing (sparse steps and layers): the sampled query rows are gathered and scored against every
   device's keys with an online softmax across devices (``kernels.parallel.routing``), so every device
   holds the same per-(batch, head) flags as single-device routing;
2. ``all_to_all``: sequence-sharded [B, N / P, H, D] → head-sharded [B, N, H_pad / P, D]; each
   device takes the flags of the heads it received;
3. placement "head_local" (default): temporal heads are permuted into the temporal layout on the
   head-local side (a local gather, no communication), the policy's sparse executor (plan, variant,
   backend) runs, outputs go back to frame-major order;
   placement "before_exchange": the permutation happens on the sequence-sharded side before step 2
   (each device gathers the whole sequence to build its slice of the permuted order) and is undone
   after step 4 the same way; the alternative the seed measured as slower, kept to time both;
4. ``all_to_all`` back to sequence-sharded.
Dense steps and layers use the same exchange around the dense executor. A policy's negative
control (``kernels.policy.negative_controls``) applies here as on one device: its flags override
after routing, and ``no_unpermute`` skips step 3's (or, before the exchange, step 4's) restoring.

Heads that do not divide by the device count are zero-padded (``kernels.parallel.exchange``). Tokens that
do not divide by it are an error (padding tokens would change the softmax of real ones): pick a
resolution whose token count N = F·Hp·Wp divides by ``parallel.sequence``.

The single-device ``kernels.policy.attention_policy.AttentionPolicy`` is the oracle: same routing rows, same plan,
same executor per head, so outputs agree to float rounding.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from kernels.masks.layouts import inverse_temporal_permutation, temporal_permutation
from kernels.parallel.exchange import (
    heads_to_sequence,
    local_head_flags,
    permute_sharded,
    sequence_to_heads,
)
from kernels.parallel.mesh import SEQ_AXIS
from kernels.parallel.routing import route_rows_sharded
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.cells import check_layer, dense_cell
from kernels.policy.routing import Routing, routing_key, sample_rows
from kernels.policy.routing_stats import send_routing

PLACEMENTS = ("head_local", "before_exchange")
_TOKENS = P(None, SEQ_AXIS)  # [B, N, ...] split along N


class SequenceParallelAttend:
    """``attend(q, k, v, *, step, layer)`` with q/k/v/out sharded along the tokens on a mesh.

    Attributes:
        inner: head-local attention of dense steps and layers (any ``attend``; it sees every
            token of H_pad / P heads).
        policy: the schedule and routing (None: every call dense).
        mesh: the mesh; its ``"seq"`` axis splits the tokens.
        placement: "head_local" or "before_exchange".
        devices: P, the size of the ``"seq"`` axis.
    """

    def __init__(
        self,
        inner: Callable[..., jax.Array],
        mesh: Mesh,
        *,
        placement: str = "head_local",
        policy: AttentionPolicy | None = None,
    ) -> None:
        """Wraps ``inner`` (and ``policy``) for the mesh; nothing is traced.

        Args:
            inner: dense head-local attention, or an ``AttentionPolicy`` (then it is the policy
                and its ``dense_attend`` the dense executor).
            mesh: mesh with axis ``"seq"`` (``kernels.parallel.mesh.make_mesh``).
            placement: where temporal heads are permuted: "head_local" or "before_exchange".
            policy: schedule and routing; overrides an ``AttentionPolicy`` given as ``inner``.

        Raises:
            ValueError: unknown placement, a mesh without a ``"seq"`` axis, or a non-policy.
        """
        if placement not in PLACEMENTS:
            raise ValueError(f"placement={placement!r}; use one of {PLACEMENTS}")
        if SEQ_AXIS not in mesh.axis_names:
            raise ValueError(
                f"mesh axes {mesh.axis_names} lack {SEQ_AXIS!r}; build it with "
                "kernels.parallel.mesh.make_mesh"
            )
        if isinstance(inner, AttentionPolicy):
            policy = inner if policy is None else policy
            inner = inner.dense_attend
        if policy is not None and not isinstance(policy, AttentionPolicy):
            raise ValueError(
                f"policy={policy!r}: expected a kernels.policy.attention_policy.AttentionPolicy"
            )
        self.inner = inner
        self.policy = policy
        self.mesh = mesh
        self.placement = placement
        self.devices = int(mesh.shape[SEQ_AXIS])

    @property
    def plan(self):
        """The policy's tile plan (None when dense), as ``AttentionPolicy.plan``."""
        return None if self.policy is None else self.policy.plan

    def at_batch_offset(self, offset: int | jax.Array) -> SequenceParallelAttend:
        """This attend for a call whose samples start at ``offset`` in the step's batch (see
        ``AttentionPolicy.at_batch_offset``); without a policy there is nothing to shift."""
        if self.policy is None:
            return self
        shifted = copy.copy(self)
        shifted.policy = self.policy.at_batch_offset(offset)
        return shifted

    def step_phases(self, num_steps: int) -> list[tuple[int, int, SequenceParallelAttend]]:
        """The loop's dense and sparse step phases, each with this attend for it (see
        ``AttentionPolicy.step_phases``); without a policy, one phase."""
        if self.policy is None:
            return [(0, num_steps, self)]
        phases = []
        for start, stop, policy in self.policy.step_phases(num_steps):
            phased = copy.copy(self)
            phased.policy = policy
            phases.append((start, stop, phased))
        return phases

    def recording_when(self, flag: jax.Array) -> SequenceParallelAttend:
        """This attend with its policy recording only where ``flag`` is True (see
        ``AttentionPolicy.recording_when``)."""
        gated = copy.copy(self)
        gated.policy = self._sparse_policy().recording_when(flag)
        return gated

    @property
    def records(self) -> bool:
        """Whether its policy records routing (``AttentionPolicy.records``)."""
        return self.policy is not None and self.policy.recorder is not None

    @property
    def stats(self):
        """The policy's recorded routing, as ``AttentionPolicy.stats``."""
        if self.policy is None:
            raise ValueError("this attend has no policy, so no routing statistics")
        return self.policy.stats

    def check_tokens(self, tokens: int) -> None:
        """Raises ValueError unless ``tokens`` split evenly over the mesh (call before compiling).

        Args:
            tokens: the sequence length N.
        """
        self._check_tokens(tokens, "the video's tokens")

    def shard_tokens(self, x: jax.Array) -> jax.Array:
        """Pins [B, N, ...] activations to be split along N (the transformer's hook).

        Args:
            x: [B, N, ...] token activations.

        Returns:
            ``x`` with a sharding constraint (same values).
        """
        self._check_tokens(x.shape[1], "token activations")
        return lax.with_sharding_constraint(x, NamedSharding(self.mesh, _TOKENS))

    def _check_tokens(self, tokens: int, what: str) -> None:
        if tokens % self.devices:
            raise ValueError(
                f"{what} have {tokens} tokens, which do not split over parallel.sequence="
                f"{self.devices} devices; use a device count dividing {tokens} or a resolution "
                f"whose tokens (F * Hp * Wp) divide by {self.devices}"
            )

    def _check(self, q: jax.Array, k: jax.Array, v: jax.Array) -> None:
        if q.ndim != 4 or not q.shape == k.shape == v.shape:
            raise ValueError(
                f"q, k, v shapes {q.shape}, {k.shape}, {v.shape}: expected three equal "
                "[batch, tokens, heads, head_dim]"
            )
        self._check_tokens(q.shape[1], "q, k, v")
        if self.policy is not None and q.shape[1] != self.policy.geometry.tokens:
            raise ValueError(
                f"q has {q.shape[1]} tokens; the policy's {self.policy.geometry} has "
                f"{self.policy.geometry.tokens}"
            )

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        *,
        step: jax.Array | int,
        layer: int | jax.Array,
    ) -> jax.Array:
        """Self-attention of block ``layer`` at step ``step`` (the model contract).

        Args:
            q: [batch, tokens, heads, head_dim], frame-major (sharded or not along tokens).
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step (traced int32 scalar inside the loop).
            layer: block index (a Python int; a traced int32 scalar in a scanned model).

        Returns:
            [batch, tokens, heads, head_dim], sharded along tokens, in q's dtype.
        """
        self._check(q, k, v)
        step = jnp.asarray(step, jnp.int32)
        policy = self.policy
        if policy is None or not policy.schedule.sparse:
            return self.dense_attention(q, k, v, step=step, layer=layer)
        check_layer(layer, policy.num_layers)
        is_dense = dense_cell(policy, step, layer)
        dense = functools.partial(self.dense_attention, step=step, layer=layer)
        if is_dense is True:
            return dense(q, k, v)
        sparse = functools.partial(self._routed, step=step, layer=layer)
        if is_dense is False:
            return sparse(q, k, v)
        return lax.cond(is_dense, dense, sparse, q, k, v)

    def dense_attention(
        self, q: jax.Array, k: jax.Array, v: jax.Array, *, step: jax.Array, layer: int | jax.Array
    ) -> jax.Array:
        """The dense executor between the two exchanges. Shapes as ``__call__``."""
        heads = q.shape[2]
        # A Python int stays one inside the body; a traced index is not closed over (an argument).
        static = layer if isinstance(layer, int) else None

        def body(q, k, v, step, layer):
            qh, kh, vh = (sequence_to_heads(x, SEQ_AXIS, self.devices) for x in (q, k, v))
            out = self.inner(qh, kh, vh, step=step, layer=layer if static is None else static)
            return heads_to_sequence(out, SEQ_AXIS, heads)

        # check_vma off: executors (Pallas calls, scans over static plans) do not all declare
        # how their values vary over the manual axis; the exchange itself is exact either way.
        run = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(_TOKENS, _TOKENS, _TOKENS, P(), P()),
            out_specs=_TOKENS,
            check_vma=False,
        )
        return run(q, k, v, jnp.asarray(step, jnp.int32), jnp.asarray(layer, jnp.int32))

    def route(
        self, q: jax.Array, k: jax.Array, v: jax.Array, *, step, layer: int | jax.Array
    ) -> Routing:
        """Routing on the sequence-sharded q/k/v, before any exchange.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step.
            layer: block index (a Python int or a traced int32 scalar).

        Returns:
            ``Routing`` ([batch, heads] flags and errors), replicated on the mesh.
        """
        policy = self._sparse_policy()
        geometry = policy.geometry

        def body(q, k, v, step, layer):
            if policy.routing_mode == "oracle":
                rows = jnp.arange(geometry.tokens, dtype=jnp.int32)
            else:
                key = routing_key(policy.seed, step, layer)
                rows = sample_rows(key, geometry.tokens, policy.schedule.routing_samples)
            return route_rows_sharded(q, k, v, rows, policy.routing_mask, geometry, SEQ_AXIS)

        run = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(_TOKENS, _TOKENS, _TOKENS, P(), P()),
            out_specs=Routing(P(), P(), P()),
        )
        return run(q, k, v, jnp.asarray(step, jnp.int32), jnp.asarray(layer, jnp.int32))

    def sparse_attention(
        self, q: jax.Array, k: jax.Array, v: jax.Array, temporal: jax.Array
    ) -> jax.Array:
        """The sparse executor with the given routing, around the exchange, per ``placement``.

        The flags are used as given; under the policy's ``no_unpermute`` control temporal heads'
        outputs stay in the temporal layout, as ``AttentionPolicy.sparse_attention`` leaves them.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            temporal: bool [batch, heads], the same on every device.

        Returns:
            [batch, tokens, heads, head_dim], frame-major, sharded along tokens.
        """
        policy = self._sparse_policy()
        self._check(q, k, v)
        heads = q.shape[2]
        if temporal.shape != (q.shape[0], heads):
            raise ValueError(
                f"temporal has shape {temporal.shape}; expected {(q.shape[0], heads)} "
                "(batch, heads)"
            )
        devices = self.devices

        def head_local(q, k, v, temporal):
            qh, kh, vh = (sequence_to_heads(x, SEQ_AXIS, devices) for x in (q, k, v))
            mine = local_head_flags(temporal, SEQ_AXIS, devices)
            out = policy.sparse_attention(qh, kh, vh, mine)
            return heads_to_sequence(out, SEQ_AXIS, heads)

        def before_exchange(q, k, v, temporal):
            perm = temporal_permutation(policy.geometry)
            moved = (permute_sharded(x, perm, temporal, SEQ_AXIS) for x in (q, k, v))
            qh, kh, vh = (sequence_to_heads(x, SEQ_AXIS, devices) for x in moved)
            out = heads_to_sequence(policy.execute_band(qh, kh, vh), SEQ_AXIS, heads)
            if not policy.restores_layout:  # the ``no_unpermute`` negative control
                return out
            inv = inverse_temporal_permutation(policy.geometry)
            return permute_sharded(out, inv, temporal, SEQ_AXIS)

        body = head_local if self.placement == "head_local" else before_exchange
        run = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(_TOKENS, _TOKENS, _TOKENS, P()),
            out_specs=_TOKENS,
            check_vma=False,  # see dense_attention
        )
        return run(q, k, v, temporal.astype(bool))

    def _sparse_policy(self) -> AttentionPolicy:
        if self.policy is None or self.policy.plan is None:
            raise ValueError("this attend has no sparse policy; build it with a sparse schedule")
        return self.policy

    def _routed(self, q, k, v, *, step: jax.Array, layer: int | jax.Array) -> jax.Array:
        routing = self.route(q, k, v, step=step, layer=layer)
        temporal = self.policy.layout_flags(routing.temporal)  # a negative control's override
        if self.policy.recorder is not None:
            send_routing(self.policy, step, temporal, routing, layer=layer)
        return self.sparse_attention(q, k, v, temporal)


def parallelize(
    attend: Callable[..., jax.Array] | None,
    mesh: Mesh,
    *,
    placement: str = "head_local",
    tokens: int | None = None,
) -> SequenceParallelAttend | None:
    """The harness hook: one attention function of a comparison made sequence-parallel.

    Args:
        attend: a dense attend, an ``AttentionPolicy``, or None (passed through).
        mesh: from ``kernels.parallel.mesh.make_mesh``.
        placement: ``parallel.permute_placement``.
        tokens: the video's token count, checked now (before anything is compiled) when given.

    Returns:
        A ``SequenceParallelAttend`` (None stays None); it keeps ``plan`` and ``stats`` of a
        policy, so code that reads them from an ``AttentionPolicy`` keeps working.

    Raises:
        ValueError: a bad placement or mesh, or ``tokens`` that do not split over the mesh.
    """
    if attend is None:
        return None
    wrapped = SequenceParallelAttend(attend, mesh, placement=placement)
    if tokens is not None:
        wrapped.check_tokens(tokens)
    return wrapped
