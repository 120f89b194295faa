"""The attention policy: a schedule plus routing turned into the model's ``attend`` function.

Contract (docs/architecture.md): ``attend(q, k, v, *, step, layer) -> out``, q/k/v/out
[batch, tokens, heads, head_dim] frame-major, ``step`` a traced int32 scalar, ``layer`` a Python int
(an unrolled model) or a traced int32 scalar (a scanned model).

Per call:
- non-sparse schedule: exactly the dense executor (no cond, so the output is bit-identical to a
  model run with that executor);
- a dense leading layer (static ``layer``): the dense executor;
- inside a loop phase of dense or of sparse steps (``step_phases``, ``in_step_phase``: the
  denoising loop runs its dense steps, then its sparse steps, as two loops), the phase decides;
- otherwise ``lax.cond(step < dense_steps, dense, sparse)`` (with a traced ``layer``, also dense
  when ``layer < dense_layers``): only the taken branch runs, and the predicate is data, so one
  loop body serves every step, and a scanned model's body every layer;
- sparse: route heads (``kernels.policy.routing``), move each temporal head's tokens into the temporal
  layout by a per-(batch, head) select between the frame-major and the permuted copy (shapes never
  depend on the flags), run the band executor (one mask and one tile plan serve both layouts: the
  band-plus-sink is applied in each head's own order, as in Sparse VideoGen), restore frame-major
  order.

A negative control (``kernels.policy.negative_controls``) breaks one of these on purpose (the
layouts routing chose, or the restoring of frame-major order), or the sparse cell's cost (the
dense executor run beside the band and discarded); with ``none`` the traced program is the correct
one, untouched.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from kernels.executors.dispatch import (
    DEFAULT_KERNEL_OPTIONS,
    Kernel,
    KernelOptions,
    make_attention,
)
from kernels.executors.pallas_tpu_cross import cross_attend_for
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import from_head_layouts, to_head_layouts
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.policy.cells import Layer, check_layer, dense_cell, step_phases
from kernels.policy.dense_attend import check_backend, make_dense_attend
from kernels.policy.negative_controls import (
    check_negative_control,
    controlled_flags,
    restores_layout,
    runs_redundant_dense,
    with_discarded,
)
from kernels.policy.routing import (
    ROUTING_MODES,
    Routing,
    route_heads,
    routing_key,
    routing_outputs_for,
)
from kernels.policy.routing_stats import (
    RoutingOutput,
    RoutingRecorder,
    RoutingStats,
    send_routing,
)
from kernels.policy.schedule import SparsitySchedule


class AttentionPolicy:
    """``attend`` for one (schedule, geometry, run length): dense or routed sparse per step/layer.

    Attributes:
        schedule: the sparsity schedule.
        geometry: token geometry of every call (q's token count must match).
        num_steps: denoising steps of the run.
        num_layers: transformer blocks.
        dense_steps: leading dense steps.
        dense_layers: leading dense layers.
        plan: the sparse executor's tile plan (None for a non-sparse schedule).
        routing_mask: the mask routing compares (the plan's logical mask; rounded for b3).
        dense_attend: the dense executor.
        cross_attend: the cross-attention the transformer runs beside this policy
            (``cross_attend_for(backend)``; None: the model's own).
        routing_outputs: how routing computes its sampled rows' outputs
            (``routing_outputs_for(backend)``).
        recorder: the routing recorder when built with ``record_stats=True``, else None.
        negative_control: ``none`` (the correct arm) or a deliberately broken variant (see
            ``kernels.policy.negative_controls``).
    """

    def __init__(
        self,
        schedule: SparsitySchedule,
        geometry: TokenGeometry,
        *,
        num_steps: int,
        num_layers: int,
        backend: str = "xla",
        block_sizes: BlockSizes | None = None,
        dense_attend: Callable[..., jax.Array] | None = None,
        routing_mode: str = "sampled",
        seed: int = 0,
        record_stats: bool = False,
        rounding_tolerance: float | None = None,
        options: KernelOptions = DEFAULT_KERNEL_OPTIONS,
        negative_control: str = "none",
    ) -> None:
        """Builds the policy and its host-side plans (nothing is traced).

        Args:
            schedule: the sparsity schedule.
            geometry: token geometry of the video.
            num_steps: denoising steps (the loop's length).
            num_layers: transformer blocks.
            backend: sparse (and default dense) backend: "xla", "pallas_tpu", "pallas_gpu" or
                "reference".
            block_sizes: tiles; default ``auto_block_sizes(tokens, backend)``.
            dense_attend: dense executor; default ``make_dense_attend("b0", backend=...)``.
            routing_mode: "sampled" (``schedule.routing_samples`` rows) or "oracle" (all rows).
            seed: routing seed; equal seeds sample equal rows at every (step, layer).
            record_stats: send routing to the host (``stats``); for one extra, untimed run.
            rounding_tolerance: b3 rounding tolerance (None accepts what the tiles allow; the
                rounded density is what ``schedule.overall_kept_fraction`` reports).
            options: the kernels' backend settings (``KernelOptions``) of the sparse executor
                and the default dense b0.
            negative_control: one of ``NEGATIVE_CONTROLS``; anything but ``none`` breaks the
                sparse cells on purpose (dense cells are untouched).

        Raises:
            ValueError: on an unknown backend, routing mode or negative control, or a schedule
                that does not suit the geometry and tiles (see ``SparsitySchedule.validate``).
        """
        check_backend(backend)
        _check_routing(routing_mode, seed)
        self.negative_control = check_negative_control(negative_control)
        self.schedule = schedule
        self.geometry = geometry
        self.num_steps = num_steps
        self.num_layers = num_layers
        self.dense_steps = schedule.dense_steps(num_steps)
        self.dense_layers = schedule.dense_layers(num_layers)
        self.backend = backend
        # Read by the transformer for every block's cross-attention (None: the model's own).
        self.cross_attend = cross_attend_for(backend, interpret=options.interpret)
        self.routing_mode = routing_mode
        # How routing computes its sampled rows' outputs: the backend's own kernel, or XLA's.
        self.routing_outputs = routing_outputs_for(backend, interpret=options.interpret)
        self.seed = seed
        self.options = options
        # The policy builds the run's plans, so it validates their tiles, once per run; the
        # executors do not recheck a prebuilt plan on every call.
        if block_sizes is None:
            block_sizes = auto_block_sizes(geometry.tokens, backend)
        block_sizes.validate(geometry.tokens, backend)
        self.block_sizes = block_sizes
        self.dense_attend = dense_attend or make_dense_attend(
            "b0", backend=backend, block_sizes=block_sizes, options=options
        )
        self.recorder = RoutingRecorder(num_steps, num_layers) if record_stats else None
        self.batch_offset = 0  # where this call's samples sit in the step's batch (records)
        self.record_flag: jax.Array | None = None  # None: every run records (recording_when)
        self.step_phase: bool | None = None  # the loop phase's steps (in_step_phase)
        self.collected: list | None = None  # where a loop body collects routing (collecting_into)
        self.plan = schedule.tile_plan(geometry, block_sizes, rounding_tolerance)
        self.routing_mask = None if self.plan is None else self.plan.logical_mask
        self.band_kernel = (
            None
            if self.plan is None
            else _band_kernel(self.plan, geometry.tokens, backend, options)
        )
        if self.plan is not None:
            schedule.warn_if_dense(num_steps, num_layers)

    def at_batch_offset(self, offset: int | jax.Array) -> AttentionPolicy:
        """This policy for a call whose samples start at ``offset`` (>= 0; an int, or a traced
        int32 scalar) in the step's batch, as separate guidance passes' unconditional pass: the
        same attention and recorder, its records stored at batch index ``offset`` onwards."""
        if isinstance(offset, int) and offset < 0:
            raise ValueError(f"batch offset {offset}: expected >= 0")
        shifted = copy.copy(self)
        shifted.batch_offset = offset
        return shifted

    def step_phases(self, num_steps: int) -> list[tuple[int, int, AttentionPolicy]]:
        """A loop of ``num_steps`` steps cut into its dense and its sparse steps, each phase with
        this policy for it (``cells.step_phases``; ``in_step_phase``): ``[(start, stop, attend)]``."""
        if not self.schedule.sparse:
            return [(0, num_steps, self)]
        cuts = step_phases(self.dense_steps, num_steps)
        return [(start, stop, self.in_step_phase(phase)) for start, stop, phase in cuts]

    def in_step_phase(self, phase: bool | None) -> AttentionPolicy:
        """This policy for a loop phase whose every step is a dense step (True) or a sparse
        step (False): the step's side of each cell is decided when tracing; None: by the step."""
        phased = copy.copy(self)
        phased.step_phase = phase
        return phased

    def routing_output(self, batch: int, heads: int) -> RoutingOutput:
        """The arrays a loop carries and returns this recording policy's routing in."""
        recorder = self._recorder().recorder
        return RoutingOutput(recorder.num_steps, recorder.num_layers, batch, heads)

    def collecting_into(self, cells: list) -> AttentionPolicy:
        """This recording policy for one loop body's trace: each sparse cell appends its
        routing to ``cells`` (``routing_stats.CellRouting``) instead of calling back."""
        collecting = copy.copy(self._recorder())
        collecting.collected = cells
        return collecting

    @property
    def records(self) -> bool:
        """Whether this policy records routing (built with ``record_stats=True``)."""
        return self.recorder is not None

    def recording_when(self, flag: jax.Array) -> AttentionPolicy:
        """This recording policy for a loop whose runs record only where the traced bool
        scalar ``flag`` is True (``routing_stats.send_routing``)."""
        gated = copy.copy(self._recorder())
        gated.record_flag = flag
        return gated

    @property
    def stats(self) -> RoutingStats:
        """Recorded routing: [steps, layers, batch, heads] flags (-1 dense) and errors (NaN)."""
        return self._recorder().recorder.stats

    def _recorder(self) -> AttentionPolicy:
        if self.recorder is None:
            raise ValueError("this policy does not record; build it with record_stats=True")
        return self

    def is_sparse_layer(self, layer: int) -> bool:
        """Whether ``layer`` runs sparse at some step."""
        sparse_steps = self.dense_steps < self.num_steps
        return self.schedule.sparse and sparse_steps and layer >= self.dense_layers

    def __call__(
        self, q: jax.Array, k: jax.Array, v: jax.Array, *, step: jax.Array | int, layer: Layer
    ) -> jax.Array:
        """Self-attention of block ``layer`` at denoising step ``step``.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major, unscaled.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step (traced int32 scalar inside the loop).
            layer: block index (a Python int; a traced int32 scalar in a scanned model).

        Returns:
            [batch, tokens, heads, head_dim] in q's dtype.
        """
        if not self.schedule.sparse:
            return self.dense_attend(q, k, v, step=step, layer=layer)
        if q.ndim != 4 or q.shape[1] != self.geometry.tokens:
            raise ValueError(
                f"q has shape {q.shape}; expected [batch, {self.geometry.tokens}, heads, "
                f"head_dim] for {self.geometry}"
            )
        check_layer(layer, self.num_layers)
        step = jnp.asarray(step, jnp.int32)
        is_dense = dense_cell(self, step, layer)
        if is_dense is True:
            return self.dense_attend(q, k, v, step=step, layer=layer)
        sparse = functools.partial(self.sparse_branch, step=step, layer=layer)
        if is_dense is False:
            return sparse(q, k, v)

        def dense(q, k, v):
            return self.dense_attend(q, k, v, step=step, layer=layer)

        return jax.lax.cond(is_dense, dense, sparse, q, k, v)

    def sparse_branch(self, q, k, v, *, step: jax.Array, layer: int | jax.Array) -> jax.Array:
        """The sparse side of ``__call__`` alone: route heads, then ``sparse_attention``.

        ``__call__`` takes it for sparse (step, layer) cells; a dry run lowers it by itself when
        the dense side's executor cannot be lowered from that machine (cuDNN without a GPU).
        Under a negative control the recorded flags are the layouts that ran (``layout_flags``),
        next to routing's unchanged errors.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major, unscaled.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step (traced int32 scalar; it seeds the routing sample).
            layer: block index (a Python int, or a scanned model's traced int32 scalar).

        Returns:
            [batch, tokens, heads, head_dim], frame-major.
        """
        if self.plan is None:
            raise ValueError(f"schedule {self.schedule.name!r} is not sparse; it has no band")
        routing = self.route(q, k, v, step=step, layer=layer)
        temporal = self.layout_flags(routing.temporal)
        if self.recorder is not None:
            send_routing(self, step, temporal, routing, layer=layer)
        return self.sparse_attention(q, k, v, temporal)

    def route(self, q, k, v, *, step: jax.Array, layer: int | jax.Array) -> Routing:
        """Routing of the sparse cell (step, layer) as ``sparse_branch`` runs it: this policy's
        mask, seed, samples and mode.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major, unscaled.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            step: denoising step (seeds the routing sample).
            layer: block index.

        Returns:
            ``Routing`` with [batch, heads] flags and errors.
        """
        return route_heads(
            q,
            k,
            v,
            self.routing_mask,
            self.geometry,
            key=routing_key(self.seed, step, layer),
            samples=self.schedule.routing_samples,
            mode=self.routing_mode,
            outputs=self.routing_outputs,
        )

    def layout_flags(self, temporal: jax.Array) -> jax.Array:
        """The layouts the sparse executor runs, given routing's choice: the choice itself,
        unless the negative control overrides it (``all_spatial``, ``all_temporal``,
        ``inverted``).

        Args:
            temporal: bool [batch, heads], routing's flags.

        Returns:
            bool [batch, heads] (``temporal`` itself, the same array, for ``none``).
        """
        if self.negative_control == "none":
            return temporal
        return controlled_flags(self.negative_control, temporal)

    @property
    def changes_layout(self) -> bool:
        """Whether a sparse cell moves tokens to another layout and back (routed heads: the
        temporal ones, whichever they are)."""
        return True

    @property
    def restores_layout(self) -> bool:
        """Whether temporal heads' outputs are restored to frame-major order (not under the
        ``no_unpermute`` control)."""
        return restores_layout(self.negative_control)

    def sparse_attention(self, q, k, v, temporal: jax.Array) -> jax.Array:
        """Band attention with the given routing: temporal heads in the temporal layout.

        The flags are used as given (a negative control's override happens in ``layout_flags``);
        under ``no_unpermute`` temporal heads' outputs are returned in the temporal layout.

        Args:
            q: [batch, tokens, heads, head_dim], frame-major.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].
            temporal: bool [batch, heads].

        Returns:
            [batch, tokens, heads, head_dim], frame-major (temporal heads in the temporal layout
            under ``no_unpermute``).
        """
        if self.plan is None:
            raise ValueError(f"schedule {self.schedule.name!r} is not sparse; it has no band")
        if temporal.shape != (q.shape[0], q.shape[2]):
            raise ValueError(
                f"temporal has shape {temporal.shape}; expected {(q.shape[0], q.shape[2])} "
                "(batch, heads)"
            )
        q_l, k_l, v_l = (to_head_layouts(x, self.geometry, temporal) for x in (q, k, v))
        out = self.execute_band(q_l, k_l, v_l)
        if not self.restores_layout:
            return out
        return from_head_layouts(out, self.geometry, temporal)

    def execute_band(self, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        """The sparse executor alone: the band on tokens already in each head's own layout.

        ``sparse_attention`` is this between a layout change and its inverse; sequence
        parallelism calls it directly when the layout change happened elsewhere.

        Args:
            q: [batch, tokens, heads, head_dim], each head in its own layout.
            k: [batch, tokens, heads, head_dim].
            v: [batch, tokens, heads, head_dim].

        Returns:
            [batch, tokens, heads, head_dim] in the same per-head layouts.
        """
        if self.band_kernel is None:
            raise ValueError(f"schedule {self.schedule.name!r} is not sparse; it has no band")
        out = self.band_kernel(q, k, v)
        if runs_redundant_dense(self.negative_control):  # a speed control: same output, more work
            out = with_discarded(out, self.dense_attend(q, k, v, step=0, layer=0))
        return out


def _band_kernel(plan, tokens: int, backend: str, options: KernelOptions) -> Kernel:
    """The band's kernel, built once from the run's tile plan (the reference backend computes
    the same logical mask densely)."""
    band = (plan.logical_mask, "reference") if backend == "reference" else None
    mask, variant = band or (plan, plan.variant)
    return make_attention(
        tokens,
        mask,
        executor=variant,
        backend="xla" if backend == "reference" else backend,
        options=options,
    )


def _check_routing(routing_mode: str, seed: int) -> None:
    """Refuses an unknown routing mode or a seed that is not an int."""
    if routing_mode not in ROUTING_MODES:
        raise ValueError(f"routing_mode={routing_mode!r}; use one of {ROUTING_MODES}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r}: expected an int")
