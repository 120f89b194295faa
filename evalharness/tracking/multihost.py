"""One run over several processes (multi-host JAX): who joins, who writes, how arrays come home.

Every process runs the same program (JAX's multi-controller model), its collectives spanning
every host's devices. Process 0, the primary, owns the run folder, the MLflow run, the videos and
the summary; the others write into a scratch folder removed when the run ends. The gate's verdict
is the primary's, sent to every process, so all exit with the same code. On one process every
function here is the plain single-host operation.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from evalharness.refusal import PreflightRefusal
from kernels.parallel.mesh import check_same_config, initialize_distributed

log = logging.getLogger(__name__)


def join(distributed: bool | None) -> bool:
    """Joins the multi-process run, if this is one; must precede every other JAX call.

    Args:
        distributed: ``parallel.distributed`` (None detects, True forces, False never joins).

    Returns:
        True when this process is one of several.
    """
    joined = initialize_distributed(distributed)
    if joined:
        log.info(
            "multi-process run: process %d of %d, %d local of %d devices",
            jax.process_index(),
            jax.process_count(),
            jax.local_device_count(),
            jax.device_count(),
        )
    return joined


def is_primary() -> bool:
    """Whether this process writes the run's folder, MLflow run and summary (process 0)."""
    return jax.process_index() == 0


# Config sections only the primary acts on (it alone logs). A multirun's sweep tag, for one, is read
# from each host's own sweep folder, so it may differ between hosts without changing the program.
PRIMARY_ONLY_SECTIONS = ("logger",)


class ConfigMismatch(PreflightRefusal):
    """The processes of a multi-host run were started with different configurations."""


def same_config(resolved: Mapping[str, Any], code_version: Callable[[], str] | None = None) -> None:
    """Refuses, on every process, a launch whose processes do not all run this configuration
    with the same code and JAX (a collective; nothing on one process).

    Args:
        resolved: the run's resolved config as plain data (``config.to_plain_dict``); each
            top-level section but :data:`PRIMARY_ONLY_SECTIONS` is compared by hash, so the error
            names the sections that differ.
        code_version: the hash of the code this process runs (``evidence.code_version``),
            computed only when there are several processes; compared with JAX's version as
            the section ``code and jax version``.

    Raises:
        ConfigMismatch: naming the processes and sections that differ from process 0's.
    """
    if jax.process_count() == 1:
        return
    if code_version is not None:
        versions = {"code": code_version(), "jax": jax.__version__}
        resolved = {**resolved, "code and jax version": versions}
    sections = {
        name: json.dumps(value, sort_keys=True, default=str)
        for name, value in resolved.items()
        if name not in PRIMARY_ONLY_SECTIONS
    }
    try:
        check_same_config(sections)
    except ValueError as error:
        raise ConfigMismatch(f"{error}; nothing ran") from None


def refuse_together(refusal: PreflightRefusal | None) -> None:
    """Raises on every process when preflight refused the run on any of them (the others would
    otherwise wait in their first collective). A collective in a multi-process run.

    Args:
        refusal: this process's refusal, or None when it was admitted.

    Raises:
        PreflightRefusal: this process's own, or one that says another process refused.
    """
    if not everywhere(refusal is None):
        raise refusal or PreflightRefusal(
            "refused by another process of this multi-host run (its log says why); nothing was "
            "allocated"
        )


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy of a (possibly several-host) array, identical on every process: a collective
    (every process calls it, in the same order) when the array spans other processes' devices.

    Args:
        array: a ``jax.Array`` (any shape) or anything ``np.asarray`` takes.

    Returns:
        The whole array on the host, of ``array``'s shape.
    """
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return np.asarray(array)


def from_primary(value: bool) -> bool:
    """The primary's ``value`` on every process (the gate's verdict: one exit code for all).

    Args:
        value: this process's value; only the primary's counts.

    Returns:
        Process 0's value.
    """
    if jax.process_count() == 1:
        return value
    sent = multihost_utils.broadcast_one_to_all(np.asarray(int(value), np.int32))
    return bool(np.asarray(sent))


def everywhere(value: bool) -> bool:
    """Whether ``value`` is True on every process (a collective: every process must call it).

    Args:
        value: this process's answer (e.g. "my cache holds the dense arms").

    Returns:
        True only when every process answered True.
    """
    if jax.process_count() == 1:
        return value
    answers = multihost_utils.process_allgather(np.asarray([int(value)], np.int32))
    return bool(np.all(np.asarray(answers)))
