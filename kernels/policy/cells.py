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
    a leading dense layer given as a Python int. What depends on data (the step; a scanned
    model's traced layer) is a traced predicate for ``lax.cond``.

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
    static_layer = isinstance(layer, int)
    if static_layer and layer < dense_layers:
        return True
    predicate: bool | jax.Array = False
    if dense_steps > 0:
        predicate = jnp.asarray(step, jnp.int32) < dense_steps
    if not static_layer and dense_layers > 0:
        predicate = jnp.logical_or(predicate, layer < dense_layers)
    return predicate
