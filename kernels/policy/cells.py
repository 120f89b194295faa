"""Which (step, layer) cells of a run attend densely, with the layer static or traced.

An unrolled model hands the attention its block index as a Python int, so a leading dense layer
is decided when tracing; a scanned model hands a traced int32 scalar, so that decision joins the
step's in one predicate for ``lax.cond``. ``AttentionPolicy`` and its sequence-parallel wrapper
both ask here.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from kernels.policy.schedule import SparsitySchedule


class RunCells(Protocol):
    """What decides a run's dense cells (``AttentionPolicy`` has it)."""

    schedule: SparsitySchedule
    num_steps: int
    dense_steps: int
    dense_layers: int
    step_phase: bool | None


# The block index ``attend`` receives: a Python int (unrolled) or a traced int32 scalar (scanned).
Layer = int | jax.Array


def check_layer(layer: Layer, num_layers: int) -> None:
    """Raises ValueError unless ``layer`` is a Python int in [0, num_layers) or an integer scalar
    array (a scanned model's traced layer index).

    Args:
        layer: the block index handed to ``attend``.
        num_layers: the model's blocks.
    """
    if isinstance(layer, jax.Array | np.ndarray):
        if layer.ndim == 0 and jnp.issubdtype(layer.dtype, jnp.integer):
            return
    elif not isinstance(layer, bool) and isinstance(layer, int):
        if 0 <= layer < num_layers:
            return
    raise ValueError(
        f"layer={layer!r}: expected a Python int in [0, {num_layers}) or an integer scalar (a "
        "scanned model's layer index)"
    )


def dense_cell(policy: RunCells, step: jax.Array, layer: Layer) -> bool | jax.Array:
    """Whether block ``layer`` at ``step`` of ``policy``'s run runs the dense executor.

    What is known when tracing is decided then: a non-sparse schedule, a run of dense steps only,
    a leading dense layer given as a Python int, the steps of a loop phase the caller runs apart
    (``step_phase``: True inside the leading dense steps, False after them). What depends on data
    (the step of a loop that runs all steps in one body; a scanned model's traced layer) is a
    traced predicate for ``lax.cond``.

    Args:
        policy: the run's policy (its schedule, dense steps and layers, step count).
        step: denoising step (int32 scalar).
        layer: block index, a Python int (unrolled model) or a traced int32 scalar (scanned).

    Returns:
        True (dense), False (sparse) or a traced bool scalar.
    """
    dense_steps, dense_layers = policy.dense_steps, policy.dense_layers
    if not policy.schedule.sparse or dense_steps >= policy.num_steps:
        return True
    if policy.step_phase is True:
        return True
    static_layer = isinstance(layer, int)
    if static_layer and layer < dense_layers:
        return True
    predicate: bool | jax.Array = False
    if dense_steps > 0 and policy.step_phase is None:
        predicate = jnp.asarray(step, jnp.int32) < dense_steps
    if not static_layer and dense_layers > 0:
        predicate = jnp.logical_or(predicate, layer < dense_layers)
    return predicate


def step_phases(dense_steps: int, num_steps: int) -> list[tuple[int, int, bool | None]]:
    """A loop of ``num_steps`` steps cut where its cells change from dense steps to sparse ones.

    A loop that runs each phase as a loop of its own hands its attention a ``step_phase``, so
    every cell's step is decided when tracing: no ``lax.cond`` per attention call, whose
    operand copies and branch bookkeeping cost a small model's CPU loop several percent.

    Args:
        dense_steps: the run's leading dense steps (``AttentionPolicy.dense_steps``).
        num_steps: the loop's steps.

    Returns:
        ``[(start, stop, step_phase)]`` covering ``[0, num_steps)`` in order: one phase
        ``(0, num_steps, None)`` when no step boundary falls inside the loop, else the dense
        steps ``(0, dense_steps, True)`` and the rest ``(dense_steps, num_steps, False)``.
    """
    if not 0 < dense_steps < num_steps:
        return [(0, num_steps, None)]
    return [(0, dense_steps, True), (dense_steps, num_steps, False)]
