"""Resumable training checkpoints: a stage's weights, optimizer state and step in one file.

A checkpoint is ``<stage>.npz`` in the run folder: every array of ``nnx.state((model,
optimizer))`` in flattening order, plus the step. It is written to a temporary name and renamed,
so a run killed mid-write keeps its previous checkpoint. Restoring checks that the arrays match
the current model's (count, shapes) and refuses otherwise, naming the mismatch.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import jax
import numpy as np
from flax import nnx


class CheckpointMismatch(ValueError):
    """A checkpoint that does not fit the model being trained (other settings or code)."""


def save_checkpoint(path: Path, step: int, *nodes: nnx.Module | nnx.Optimizer) -> None:
    """Writes the state of ``nodes`` and ``step`` to ``path`` atomically."""
    leaves = jax.tree.leaves(nnx.state(nodes))
    arrays = {f"a{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        np.savez(f, step=np.int64(step), **arrays)
    os.replace(partial, path)


def saved_step(path: Path) -> int | None:
    """The step ``path`` was saved at, without loading its arrays (None when there is no file)."""
    if not Path(path).is_file():
        return None
    with np.load(path) as data:
        return int(data["step"])


def check_checkpoint(path: Path) -> None:
    """Reads ``path`` through (every array's checksum and its step) without keeping it.

    Raises:
        CheckpointMismatch: the file cannot be read (truncated, damaged, not a checkpoint); the
            message names it and the fix.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
            if damaged is not None:
                raise zipfile.BadZipFile(f"{damaged} fails its checksum")
        with np.load(path) as data:
            int(data["step"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise CheckpointMismatch(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {err}); it was cut "
            "short or damaged: delete it to train that stage again from its start, or put back "
            "a good copy"
        ) from None


def restore_checkpoint(path: Path, *nodes: nnx.Module | nnx.Optimizer) -> int:
    """Loads ``path`` into ``nodes`` (in place) and returns the step it was saved at.

    Raises:
        CheckpointMismatch: the file holds another number of arrays or other shapes.
    """
    state = nnx.state(nodes)
    leaves, treedef = jax.tree.flatten(state)
    with np.load(path) as data:
        saved = [data[f"a{i}"] for i in range(len(data.files) - 1)]
        step = int(data["step"])
    if len(saved) != len(leaves):
        raise CheckpointMismatch(
            f"{path} holds {len(saved)} arrays, the model being trained has {len(leaves)}; it was "
            "written with other settings: start a new run folder or delete the checkpoint"
        )
    for i, (old, new) in enumerate(zip(saved, leaves, strict=True)):
        if old.shape != tuple(new.shape):
            raise CheckpointMismatch(
                f"{path}: array {i} has shape {old.shape}, the model expects {tuple(new.shape)}; "
                "start a new run folder or delete the checkpoint"
            )
    restored = [
        jax.numpy.asarray(a, dtype=leaf.dtype) for a, leaf in zip(saved, leaves, strict=True)
    ]
    nnx.update(nodes, jax.tree.unflatten(treedef, restored))
    return step
