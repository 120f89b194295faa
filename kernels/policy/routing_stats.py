"""Routing statistics of a denoising run: per (step, layer, batch, head) flags and errors.

The model's ``attend`` cannot return extra outputs. Two ways out, both into a ``RoutingRecorder``
(cells that ran dense keep flag -1 and NaN errors):

- **as the loop's output** (``RoutingOutput``): where every attention call is traced in the loop
  body itself (unrolled layers, one model call per step), each sparse cell appends its routing to
  a list while the body is traced, and the loop writes the list into arrays it carries and
  returns. No host callback: the program is the same in every run, its timing untouched, and the
  persistent compilation cache can keep it. The sparse arm's warm-up run loads them.
- **by host callback** (:func:`send_routing`) elsewhere (a scanned model, separate guidance
  passes, sequence parallelism, whose calls sit in inner traces): ``jax.debug.callback`` behind a
  runtime flag, so only the untimed warm-up run sends (one scalar branch per cell).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

DENSE_FLAG = -1


@dataclasses.dataclass(frozen=True)
class RoutingStats:
    """Routing of a whole run.

    Attributes:
        temporal: int8 [steps, layers, batch, heads]; 1 temporal, 0 spatial, -1 dense cell.
        spatial_error: float32 [steps, layers, batch, heads]; NaN for dense cells.
        temporal_error: float32 [steps, layers, batch, heads]; NaN for dense cells.
    """

    temporal: np.ndarray
    spatial_error: np.ndarray
    temporal_error: np.ndarray

    @property
    def sparse_cells(self) -> np.ndarray:
        """bool [steps, layers]: cells where routing ran (all of a cell's heads are routed)."""
        if self.temporal.shape[2] * self.temporal.shape[3] == 0:
            return np.zeros(self.temporal.shape[:2], dtype=bool)
        return np.all(self.temporal != DENSE_FLAG, axis=(2, 3))

    def temporal_fraction(self) -> np.ndarray:
        """float [steps, layers]: fraction of (batch, head) pairs routed temporal; NaN if dense."""
        sparse = self.sparse_cells
        out = np.full(self.temporal.shape[:2], np.nan)
        if sparse.any():
            out[sparse] = (self.temporal[sparse] == 1).mean(axis=(1, 2))
        return out

    def overall_temporal_fraction(self) -> float:
        """Fraction of all routed (step, layer, batch, head) decisions that chose temporal."""
        routed = self.temporal[self.temporal != DENSE_FLAG]
        return float((routed == 1).mean()) if routed.size else float("nan")

    def as_dict(self) -> dict[str, list]:
        """Nested lists (NaN kept as float nan) for JSON-like logging."""
        return {
            "temporal": self.temporal.tolist(),
            "spatial_error": self.spatial_error.tolist(),
            "temporal_error": self.temporal_error.tolist(),
        }


class RoutingRecorder:
    """Host-side sink for ``jax.debug.callback`` routing records.

    Arrays are allocated at the first record (batch and heads come from the data), so one recorder
    serves any batch size. A run overwrites the cells it routes; call ``reset`` between runs whose
    records must not mix.

    Args:
        num_steps: denoising steps of the run.
        num_layers: transformer blocks.
    """

    def __init__(self, num_steps: int, num_layers: int) -> None:
        self.num_steps = num_steps
        self.num_layers = num_layers
        self._lock = threading.Lock()  # callbacks may arrive from runtime threads
        self._temporal: np.ndarray | None = None
        self._spatial_error: np.ndarray | None = None
        self._temporal_error: np.ndarray | None = None

    def reset(self) -> None:
        """Forgets every record."""
        with self._lock:
            self._temporal = self._spatial_error = self._temporal_error = None

    def record(
        self,
        step: np.ndarray,
        temporal: np.ndarray,
        spatial_error: np.ndarray,
        temporal_error: np.ndarray,
        batch_offset: np.ndarray | int = 0,
        *,
        layer: np.ndarray | int,
    ) -> None:
        """Stores one (step, layer)'s routing (called on the host by ``jax.debug.callback``).

        Args:
            step: int scalar, the denoising step.
            temporal: bool [batch, heads].
            spatial_error: float [batch, heads].
            temporal_error: float [batch, heads].
            batch_offset: int scalar, index of this call's first sample in the step's batch
                (the unconditional pass of separate guidance passes records after the
                conditional one).
            layer: block index (an int scalar array from a scanned model's traced index).
        """
        s = int(np.asarray(step))
        layer = int(np.asarray(layer))
        flags = np.asarray(temporal)
        first = int(np.asarray(batch_offset))
        rows = slice(first, first + flags.shape[0])
        with self._lock:
            if self._temporal is None or self._temporal.shape[3:] != flags.shape[1:]:
                shape = (self.num_steps, self.num_layers, rows.stop, *flags.shape[1:])
                self._temporal = np.full(shape, DENSE_FLAG, dtype=np.int8)
                self._spatial_error = np.full(shape, np.nan, dtype=np.float32)
                self._temporal_error = np.full(shape, np.nan, dtype=np.float32)
            elif self._temporal.shape[2] < rows.stop:  # a later pass of the same step's batch
                grow = [(0, 0), (0, 0), (0, rows.stop - self._temporal.shape[2]), (0, 0)]
                self._temporal = np.pad(self._temporal, grow, constant_values=DENSE_FLAG)
                self._spatial_error = np.pad(self._spatial_error, grow, constant_values=np.nan)
                self._temporal_error = np.pad(self._temporal_error, grow, constant_values=np.nan)
            self._temporal[s, layer, rows] = flags.astype(np.int8)
            self._spatial_error[s, layer, rows] = np.asarray(spatial_error, np.float32)
            self._temporal_error[s, layer, rows] = np.asarray(temporal_error, np.float32)

    def load(self, temporal: Any, spatial_error: Any, temporal_error: Any) -> None:
        """Replaces the records by a whole run's (``RoutingOutput``'s arrays, read to the host).

        Args:
            temporal: int8 [steps, layers, batch, heads]; -1 where the cell ran dense.
            spatial_error: float32 [steps, layers, batch, heads]; NaN where dense.
            temporal_error: float32 [steps, layers, batch, heads]; NaN where dense.
        """
        arrays = [np.array(x) for x in (temporal, spatial_error, temporal_error)]
        if arrays[0].shape[:2] != (self.num_steps, self.num_layers):
            raise ValueError(
                f"routing of shape {arrays[0].shape}: expected [{self.num_steps} steps, "
                f"{self.num_layers} layers, batch, heads]"
            )
        with self._lock:
            self._temporal = arrays[0].astype(np.int8)
            self._spatial_error, self._temporal_error = (a.astype(np.float32) for a in arrays[1:])

    @property
    def stats(self) -> RoutingStats:
        """Copies of the records so far (waits for pending callbacks first).

        Before any record the arrays are [steps, layers, 0, 0].
        """
        jax.effects_barrier()
        with self._lock:
            if self._temporal is None:
                empty = (self.num_steps, self.num_layers, 0, 0)
                return RoutingStats(
                    np.full(empty, DENSE_FLAG, np.int8),
                    np.full(empty, np.nan, np.float32),
                    np.full(empty, np.nan, np.float32),
                )
            return RoutingStats(
                self._temporal.copy(), self._spatial_error.copy(), self._temporal_error.copy()
            )


def send_routing(policy: Any, step: jax.Array, temporal: jax.Array, routing: Any, *, layer) -> None:
    """Sends one sparse cell's routing on: into ``policy.collected`` (a list the loop body writes
    into its ``RoutingOutput``) where the loop collects it, else to ``policy.recorder`` on the
    host: in every run when ``policy.record_flag`` is None, else only in the runs where that
    traced bool scalar is True (the callback sits in a branch the other runs skip).

    Args:
        policy: an ``AttentionPolicy`` with a recorder (its ``record_flag``, ``batch_offset``).
        step: the denoising step (int32 scalar).
        temporal: bool [batch, heads], the layouts that ran.
        routing: the cell's ``Routing`` (its ``spatial_error``, ``temporal_error``).
        layer: block index (an int, or a scanned model's traced int32 scalar).
    """

    if policy.collected is not None:
        if not isinstance(layer, int):
            raise ValueError(
                f"layer={layer!r}: a loop collects routing from unrolled layers only (a Python "
                "int); a scanned model's routing goes by callback"
            )
        policy.collected.append((layer, temporal, routing.spatial_error, routing.temporal_error))
        return

    def send() -> None:
        jax.debug.callback(
            policy.recorder.record,
            step,
            temporal,
            routing.spatial_error,
            routing.temporal_error,
            policy.batch_offset,
            layer=layer,
        )

    if policy.record_flag is None:
        send()
    else:
        jax.lax.cond(jnp.asarray(policy.record_flag, bool), send, lambda: None)


# One sparse cell's routing as a loop body traced it: (layer, temporal [batch, heads], spatial
# error, temporal error).
CellRouting = tuple[int, jax.Array, jax.Array, jax.Array]


@dataclasses.dataclass(frozen=True)
class RoutingOutput:
    """A loop's routing as arrays the loop carries and returns: [steps, layers, batch, heads].

    Attributes:
        num_steps: the loop's steps.
        num_layers: transformer blocks.
        batch: samples per model call (both guidance halves of a joint batch).
        heads: attention heads.
    """

    num_steps: int
    num_layers: int
    batch: int
    heads: int

    def initial(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Every cell dense: flags -1 (int8), errors NaN (float32)."""
        shape = (self.num_steps, self.num_layers, self.batch, self.heads)
        nan = jnp.full(shape, jnp.nan, jnp.float32)
        return jnp.full(shape, DENSE_FLAG, jnp.int8), nan, nan

    def write(
        self, arrays: tuple[jax.Array, jax.Array, jax.Array], cells: list[CellRouting], step
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``arrays`` with the cells of ``step`` (a traced int32 scalar) written in."""
        temporal, spatial_error, temporal_error = arrays
        for layer, flags, spatial, temporal_err in cells:
            if flags.shape != (self.batch, self.heads):
                raise ValueError(
                    f"routing of shape {flags.shape} at layer {layer}: expected "
                    f"({self.batch}, {self.heads}) (batch, heads)"
                )
            temporal = temporal.at[step, layer].set(flags.astype(jnp.int8))
            spatial_error = spatial_error.at[step, layer].set(spatial.astype(jnp.float32))
            temporal_error = temporal_error.at[step, layer].set(temporal_err.astype(jnp.float32))
        return temporal, spatial_error, temporal_error
