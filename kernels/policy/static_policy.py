"""The attention policy of a static-mask schedule (``sta``, ``radial``): no routing.

Dense cells are ``AttentionPolicy``'s own (the same dense executor, the same ``lax.cond`` on the
step). A sparse cell moves every head's tokens into the mask's layout (STA's tile order; Radial
stays frame-major), runs the schedule's tile plan on the block-sparse executor of the backend,
and moves the output back: one mask, one plan, one kernel object built once per run.
"""

from __future__ import annotations

import jax

from kernels.masks.sta import from_tile_order, to_tile_order
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.negative_controls import SPEED_CONTROLS
from kernels.policy.routing import Routing
from kernels.policy.schedule import SparsitySchedule

# Routing's controls have no meaning without routing; ``no_unpermute`` leaves STA's output in
# its tile order (a layout that is not restored), the one quality mistake a static mask can make;
# the speed control applies to every sparse executor.
STATIC_NEGATIVE_CONTROLS = ("none", "no_unpermute", *SPEED_CONTROLS)


class StaticMaskPolicy(AttentionPolicy):
    """``attend`` for a static-mask schedule: dense or the one static mask per step/layer.

    Built with ``AttentionPolicy``'s arguments; ``plan`` is the static mask's tile plan and
    ``layout`` its token layout (None: frame-major).
    """

    def __init__(self, schedule: SparsitySchedule, geometry, **kwargs) -> None:
        """See ``AttentionPolicy``; also refuses what a static mask cannot do.

        Raises:
            ValueError: a routed (``svg``) schedule, ``record_stats`` (there is no routing to
                record), or a negative control other than ``STATIC_NEGATIVE_CONTROLS`` (and
                ``no_unpermute`` for a mask without a layout change).
        """
        if schedule.routes:
            raise ValueError(
                f"schedule {schedule.name!r} routes heads (method={schedule.method}); "
                "use AttentionPolicy"
            )
        if kwargs.get("record_stats"):
            raise ValueError(
                f"schedule {schedule.name!r} ({schedule.method}) has no routing to record"
            )
        super().__init__(schedule, geometry, **kwargs)
        self.layout = schedule.layout(geometry) if schedule.sparse else None
        allowed = (
            STATIC_NEGATIVE_CONTROLS
            if self.changes_layout
            else tuple(c for c in STATIC_NEGATIVE_CONTROLS if c != "no_unpermute")
        )
        if self.negative_control not in allowed:
            raise ValueError(
                f"negative_control={self.negative_control!r} does not apply to schedule "
                f"{schedule.name!r} ({schedule.method}, no routing); use one of {allowed}"
            )

    @property
    def changes_layout(self) -> bool:
        """Whether a sparse cell moves tokens to the mask's layout and back (STA's tile order;
        a frame-major mask such as Radial's does not)."""
        return self.layout is not None

    def sparse_branch(self, q, k, v, *, step: jax.Array, layer) -> jax.Array:
        """The sparse side of ``__call__``: ``sparse_attention`` (no routing, so step and layer
        do not enter).

        Args:
            q: [batch, tokens, heads, head_dim], frame-major, unscaled.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step (unused).
            layer: block index (unused).

        Returns:
            [batch, tokens, heads, head_dim], frame-major.
        """
        del step, layer
        return self.sparse_attention(q, k, v)

    def route(self, q, k, v, *, step: jax.Array, layer) -> Routing:
        """Refused: a static mask routes nothing."""
        raise ValueError(f"schedule {self.schedule.name!r} ({self.schedule.method}) does not route")

    def sparse_attention(self, q, k, v, temporal: jax.Array | None = None) -> jax.Array:
        """The static mask on every head: layout in, the plan's kernel, layout out.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            temporal: must be None (there are no routing flags).

        Returns:
            [batch, tokens, heads, head_dim], frame-major (in the mask's layout under
            ``no_unpermute``).
        """
        if temporal is not None:
            raise ValueError(f"schedule {self.schedule.name!r} takes no routing flags")
        if self.layout is None:
            return self.execute_band(q, k, v)
        q_l, k_l, v_l = (to_tile_order(x, self.layout) for x in (q, k, v))
        out = self.execute_band(q_l, k_l, v_l)
        return from_tile_order(out, self.layout) if self.restores_layout else out


def make_policy(schedule: SparsitySchedule, geometry, **kwargs) -> AttentionPolicy:
    """The policy of ``schedule``: ``AttentionPolicy`` when it routes (``svg``), else
    ``StaticMaskPolicy``; the keyword arguments are ``AttentionPolicy``'s."""
    cls = AttentionPolicy if schedule.routes else StaticMaskPolicy
    return cls(schedule, geometry, **kwargs)
