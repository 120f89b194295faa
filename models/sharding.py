"""Placing the transformer's parameters and inputs on a sequence-parallel mesh.

Rules (``PARAM_RULES``):
- ``"replicated"`` (default): every device holds every parameter. Activations are what sequence
  parallelism splits; the weights are read locally with no communication. Wan 1.3B (5.3 GB in
  float32) fits any accelerator this way; Wan 14B needs 28 GB per device in bfloat16.
- ``"fsdp"``: every 2-D parameter of at least ``min_size`` elements (the attention and FFN matmul
  weights, ~99% of the 14B model's bytes) is split along its larger dimension that divides by the
  device count; the rest stays replicated. XLA gathers a weight where it is used (once per layer
  per step), trading that traffic for holding about 1 / P of the model: 14B in bfloat16 becomes
  about 3.5 GB per device on 8 devices (``param_bytes_per_device``).

A scanned model (``WanTransformer(scan_layers=True)``) stacks its blocks' parameters along a
leading layer axis; that axis is never split, and each layer's slice is placed as the unrolled
model places that layer's parameter, so both forms hold the same bytes on every device.

The functions take a ``jax.sharding.Mesh`` and an axis name, so this module depends on nothing
outside ``models`` (the mesh comes from ``kernels.parallel.mesh.make_mesh``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

PARAM_RULES = ("replicated", "fsdp")
# 2^20 elements: every Wan 1.3B/14B attention and FFN matrix is larger, every bias, norm and
# modulation table smaller.
DEFAULT_MIN_SHARDED_SIZE = 1 << 20


def _spec(shape: tuple[int, ...], devices: int, rule: str, axis: str, min_size: int) -> P:
    if rule == "replicated" or len(shape) != 2 or math.prod(shape) < min_size:
        return P()
    # Larger dimension first: its shards are the largest contiguous pieces.
    for dim in sorted(range(2), key=lambda d: -shape[d]):
        if shape[dim] % devices == 0:
            return P(*(axis if d == dim else None for d in range(2)))
    return P()


def _check(mesh: Mesh, rule: str, axis: str) -> None:
    if rule not in PARAM_RULES:
        raise ValueError(f"rule={rule!r}; use one of {PARAM_RULES}")
    if axis not in mesh.axis_names:
        raise ValueError(f"axis={axis!r} is not a mesh axis; the mesh has {mesh.axis_names}")


def param_shardings(
    model: nnx.Module,
    mesh: Mesh,
    rule: str = "replicated",
    *,
    axis: str = "seq",
    min_size: int = DEFAULT_MIN_SHARDED_SIZE,
) -> nnx.State:
    """The sharding of every parameter under ``rule`` (works on an abstract model too).

    Args:
        model: a ``WanTransformer``, loaded or from ``abstract_transformer``.
        mesh: the device mesh.
        rule: one of ``PARAM_RULES``.
        axis: the mesh axis to split weights over ("fsdp").
        min_size: smallest 2-D parameter (elements) that "fsdp" splits.

    Returns:
        An ``nnx.State`` of ``NamedSharding`` with the model's parameter structure.
    """
    _check(mesh, rule, axis)
    devices = int(mesh.shape[axis])
    stacked = getattr(model, "scan_layers", False)

    def sharding(path: tuple[Any, ...], x: Any) -> NamedSharding:
        shape = tuple(x.shape)
        if stacked and getattr(path[0], "key", None) == "blocks":
            # A scanned model's block parameter [layers, ...]: each layer split as unrolled.
            return NamedSharding(mesh, P(None, *_spec(shape[1:], devices, rule, axis, min_size)))
        return NamedSharding(mesh, _spec(shape, devices, rule, axis, min_size))

    return jax.tree_util.tree_map_with_path(sharding, nnx.state(model))


def place_params(
    model: nnx.Module,
    mesh: Mesh,
    rule: str = "replicated",
    *,
    axis: str = "seq",
    min_size: int = DEFAULT_MIN_SHARDED_SIZE,
) -> nnx.Module:
    """Moves a loaded model's parameters onto the mesh, in place (e.g. after ``load_transformer``).

    Call it before building a ``models.pipeline.DenoiseLoop``: the loop captures the parameters
    when it is built.

    Args:
        model: a ``WanTransformer`` with concrete parameters.
        mesh, rule, axis, min_size: as ``param_shardings``.

    Returns:
        ``model`` (same object), its parameters placed.
    """
    shardings = param_shardings(model, mesh, rule, axis=axis, min_size=min_size)
    placed = jax.device_put(nnx.state(model), shardings)
    nnx.update(model, placed)
    return model


def param_bytes_per_device(
    model: nnx.Module,
    mesh: Mesh,
    rule: str = "replicated",
    *,
    axis: str = "seq",
    min_size: int = DEFAULT_MIN_SHARDED_SIZE,
) -> int:
    """Bytes of parameters each device holds under ``rule`` (abstract models welcome).

    Args:
        model, mesh, rule, axis, min_size: as ``param_shardings``.

    Returns:
        The largest per-device total (every device holds the same under these rules).
    """
    shardings = param_shardings(model, mesh, rule, axis=axis, min_size=min_size)
    leaves = jax.tree.leaves(nnx.state(model))
    total = 0
    for x, sharding in zip(leaves, jax.tree.leaves(shardings), strict=True):
        shard = sharding.shard_shape(tuple(x.shape))
        total += math.prod(shard) * x.dtype.itemsize
    return total


def shard_model_inputs(mesh: Mesh, *arrays: Any) -> tuple[Any, ...]:
    """Replicates the denoising inputs (noise, text embeddings) on the mesh; None passes through.

    Latents [B, 16, F, H, W] and text [B, L, text_dim] are small next to the token activations,
    which the transformer shards itself after the patch embedding.

    Args:
        mesh: the device mesh.
        *arrays: arrays or None.

    Returns:
        The arrays, replicated on every device of ``mesh``.
    """
    replicated = NamedSharding(mesh, P())
    return tuple(None if x is None else jax.device_put(x, replicated) for x in arrays)
