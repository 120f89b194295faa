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


def detect_cluster(env: Mapping[str, str]) -> str | None:
    """Names the multi-process launch this environment is part of, or None for a lone process.

    Recognised: a launcher's ``JAX_COORDINATOR_ADDRESS``; a Slurm job step of several tasks
    (``srun``, ``SLURM_STEP_NUM_TASKS`` > 1: a one-task job, e.g. one job of a submitit sweep, is
    a lone process); a TPU pod slice whose ``TPU_WORKER_HOSTNAMES`` lists several hosts. A Cloud
    TPU VM that only publishes its workers through the metadata server is not recognised from
    the environment: set ``parallel.distributed=true`` there.
    """
    if env.get(_COORDINATOR_ENV):
        return f"{_COORDINATOR_ENV}={env[_COORDINATOR_ENV]}"
    tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if tasks.isdigit() and int(tasks) > 1:
        return f"a Slurm step of {tasks} tasks"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1:
        return f"a TPU pod slice of {len(hosts)} hosts"
    return None


def initialize_distributed(
    distributed: bool | None = None, env: Mapping[str, str] | None = None
) -> bool:
    """Joins a multi-process run through ``jax.distributed.initialize`` when launched as one.

    Must run before JAX touches a device (JAX's own rule): the harness calls it first thing.

    Args:
        distributed: True forces initialisation (a cluster JAX detects by itself), False skips
            it, None initialises when :func:`detect_cluster` recognises the launch.
        env: environment to read (default ``os.environ``).

    Returns:
        True when this process is part of an initialised multi-process run.

    Raises:
        ValueError: a partial or malformed launcher environment.
        RuntimeError: JAX already started a backend, so it can no longer join (names the fix).
    """
    env = os.environ if env is None else env
    if jax.distributed.is_initialized():
        return True
    if distributed is False or (distributed is None and detect_cluster(env) is None):
        return False
    coordinator = env.get(_COORDINATOR_ENV)
    kwargs: dict[str, object] = {}
    if coordinator:
        num_processes = _env_int(env, _PROCESS_ENV[0])
        process_id = _env_int(env, _PROCESS_ENV[1])
        if not 0 <= process_id < num_processes:
            raise ValueError(
                f"{_PROCESS_ENV[1]}={process_id}: expected 0 <= id < "
                f"{_PROCESS_ENV[0]}={num_processes}"
            )
        kwargs = dict(
            coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
        )
    try:
        jax.distributed.initialize(**kwargs)  # without kwargs the cluster supplies everything
    except RuntimeError as error:
        if "before" in str(error) or "already" in str(error):
            raise RuntimeError(
                f"cannot join the multi-process run ({error}): something used JAX before the "
                "harness initialised the distributed runtime; call "
                "kernels.parallel.mesh.initialize_distributed first, or set "
                "parallel.distributed=false for a single-process run"
            ) from error
        raise
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


def check_same_config(sections: Mapping[str, str]) -> None:
    """Raises unless every process of the run was started with the same configuration.

    One process: nothing to compare. Several: each contributes the digests of its resolved config
    through ``multihost_utils.process_allgather`` (a collective: every process calls it), and
    every process raises the same error, so a mismatched launch fails together before any work.

    Args:
        sections: the resolved configuration by section (name -> text serialised identically
            on every host; the same names on every process), so a mismatch is named.

    Raises:
        ValueError: naming the processes whose config differs from process 0's, and where.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    sections = dict(sorted(sections.items()))
    names = list(sections)
    mine = np.stack([config_digest(text) for text in sections.values()])  # [sections, 2]
    digests = np.asarray(multihost_utils.process_allgather(mine))
    digests = digests.reshape(jax.process_count(), len(names), -1)
    differ = {
        p: [n for k, n in enumerate(names) if not np.array_equal(digests[p, k], digests[0, k])]
        for p in range(1, digests.shape[0])
    }
    differ = {p: where for p, where in differ.items() if where}
    if differ:
        listed = "; ".join(f"process {p} in {', '.join(where)}" for p, where in differ.items())
        raise ValueError(
            f"multi-host launch with mismatched configs (differing from process 0 by hash: "
            f"{listed}): start every process with the same overrides, config files and checkout"
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
