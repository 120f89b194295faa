"""The device mesh of sequence parallelism: one axis, ``"seq"``, on JAX's own distributed runtime.

Single host: the mesh takes the first ``sequence`` devices of ``jax.devices()``. Multi-host: the
launcher sets ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` (or passes
``distributed=True`` on a cluster JAX detects by itself, e.g. a TPU pod or SLURM);
``jax.distributed.initialize`` then joins the processes and ``jax.devices()`` lists every host's
devices. ``check_same_config`` compares a hash of the run's configuration across processes so a
launch with mismatched configs fails before anything is compiled.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh

SEQ_AXIS = "seq"
# Environment of a launcher-driven multi-process run (the names jax.distributed reads itself).
_COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"
_PROCESS_ENV = ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def _env_int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name)
    if value is None:
        raise ValueError(
            f"{_COORDINATOR_ENV} is set but {name} is not; a multi-host launch sets "
            f"{_COORDINATOR_ENV}, {_PROCESS_ENV[0]} and {_PROCESS_ENV[1]}"
        )
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an integer") from None


def initialize_distributed(
    distributed: bool | None = None, env: Mapping[str, str] | None = None
) -> bool:
    """Joins a multi-process run through ``jax.distributed.initialize`` when launched as one.

    Must run before JAX touches a device (JAX's own rule).

    Args:
        distributed: True forces initialisation (auto-detected clusters), False skips it, None
            initialises when ``JAX_COORDINATOR_ADDRESS`` is in the environment.
        env: environment to read (default ``os.environ``).

    Returns:
        True when this process is part of an initialised multi-process run.

    Raises:
        ValueError: a partial or malformed launcher environment.
    """
    env = os.environ if env is None else env
    if jax.distributed.is_initialized():
        return True
    coordinator = env.get(_COORDINATOR_ENV)
    if distributed is False or (distributed is None and coordinator is None):
        return False
    if coordinator is None:
        jax.distributed.initialize()  # the cluster environment supplies everything
        return True
    num_processes = _env_int(env, _PROCESS_ENV[0])
    process_id = _env_int(env, _PROCESS_ENV[1])
    if not 0 <= process_id < num_processes:
        raise ValueError(
            f"{_PROCESS_ENV[1]}={process_id}: expected 0 <= id < {_PROCESS_ENV[0]}={num_processes}"
        )
    jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)
    return True


def make_mesh(sequence: int | None = None, *, distributed: bool | None = None) -> Mesh:
    """A one-axis mesh ``("seq",)`` over which the token sequence is split.

    Args:
        sequence: devices in the mesh; None or 0 means every device (all hosts' devices in a
            multi-process run, all local devices otherwise).
        distributed: see ``initialize_distributed``.

    Returns:
        ``jax.sharding.Mesh`` with axis ``SEQ_AXIS`` of size ``sequence``.

    Raises:
        ValueError: ``sequence`` negative, not an int, or larger than the device count.
    """
    if sequence is None:
        sequence = 0
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise ValueError(f"parallel.sequence={sequence!r}: expected a device count >= 1 (0 = all)")
    initialize_distributed(distributed)
    devices = jax.devices()
    if sequence == 0:
        sequence = len(devices)
    if sequence > len(devices):
        raise ValueError(
            f"parallel.sequence={sequence} devices requested but only {len(devices)} are "
            f"available ({devices[0].platform}); use at most {len(devices)}, or on CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={sequence} before JAX starts"
        )
    if jax.process_count() > 1 and sequence != len(devices):
        raise ValueError(
            f"parallel.sequence={sequence} in a {jax.process_count()}-process run: a multi-host "
            f"mesh must span every process's devices; use {len(devices)} (or 0)"
        )
    return Mesh(np.asarray(devices[:sequence]), (SEQ_AXIS,))


def config_digest(config_text: str) -> np.ndarray:
    """The first 8 bytes of the SHA-256 of ``config_text`` as two uint32 words."""
    digest = hashlib.sha256(config_text.encode()).digest()[:8]
    return np.frombuffer(digest, dtype=np.uint32).copy()


def check_same_config(config_text: str) -> None:
    """Raises unless every process of the run was started with the same configuration.

    One process: nothing to compare. Several: each contributes the digest of its resolved config
    (e.g. the YAML the harness writes) through ``multihost_utils.process_allgather``.

    Args:
        config_text: the resolved configuration, serialised identically on every host.

    Raises:
        ValueError: naming the processes whose config differs from process 0's.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    digests = np.asarray(multihost_utils.process_allgather(config_digest(config_text)))
    digests = digests.reshape(jax.process_count(), -1)
    differ = [p for p in range(digests.shape[0]) if not np.array_equal(digests[p], digests[0])]
    if differ:
        raise ValueError(
            f"multi-host launch with mismatched configs: processes {differ} differ from process 0 "
            "(config hash); start every host with the same overrides"
        )


def describe_mesh(mesh: Mesh) -> dict[str, str | int]:
    """What to log about a mesh (MLflow params): axis sizes, device kind, process count."""
    devices = mesh.devices.reshape(-1)
    return {
        "mesh_axes": ",".join(f"{name}={size}" for name, size in mesh.shape.items()),
        "mesh_devices": int(devices.size),
        "mesh_platform": devices[0].platform,
        "mesh_device_kind": devices[0].device_kind,
        "mesh_processes": jax.process_count(),
    }
