"""The dense arm's cache key: every input that changes its latents, and nothing else.

A sweep over sparse schedules computes the dense control once; any change of model (every
checkpoint part, by content, and a hub checkpoint's commit), resolution, steps, seed, prompts,
guidance, dtype, dense executor, devices used, per-step callback, code or environment gives a new
key. Timing is not an input: every run times its arms afresh.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from evalharness.assembly import sequence_devices
from evalharness.config import EvalConfig
from evalharness.machine import cpu_model

# Packages whose source decides what the dense arm computes (the harness builds the model, the
# sampler's inputs, the attention functions and the decode).
_CODE_PACKAGES = ("models", "kernels", "evalharness")
_REPO_ROOT = Path(__file__).resolve().parents[2]


def code_files(root: str | Path | None = None) -> list[Path]:
    """The source files :func:`code_version` hashes: every ``*.py`` under ``models/``,
    ``kernels/`` and ``evalharness/`` of ``root`` (default: this repository), sorted."""
    root = Path(root) if root is not None else _REPO_ROOT
    return sorted(
        path
        for package in _CODE_PACKAGES
        for path in (root / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def code_version(root: str | Path | None = None) -> str:
    """Hash of the paths and contents of :func:`code_files` under ``root`` (default: this
    repository): works without git, changes with any edit, addition, removal or rename.

    This repository's version is hashed once per process: a process runs the code it imported,
    so edits made to the tree meanwhile must not change its dense-arm cache keys (a schedule
    search would otherwise miss its own first run's entry on every later run).
    """
    return _this_code_version() if root is None else _hash_tree(Path(root))


@functools.cache
def _this_code_version() -> str:
    return _hash_tree(_REPO_ROOT)


def _hash_tree(root: Path) -> str:
    digest = hashlib.sha256()
    for path in code_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# Accelerator runtimes installed beside jaxlib; their versions change the compiled programs.
_RUNTIME_DISTRIBUTIONS = (
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "libtpu",
    "libtpu-nightly",
)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_fields() -> dict[str, Any]:
    """What of this process's environment decides the dense arm's numbers (part of its key):
    CPU model and architecture (XLA's CPU code follows the host), accelerator and runtime, the
    XLA/libtpu flags (whitespace-normalised), JAX's numerics switches and the versions of jax,
    jaxlib, flax and any accelerator plugin. Not the host *name*: the same machine type elsewhere
    computes the same arm (the name is recorded as provenance).
    """
    device = jax.devices()[0]
    plugins = {name: _version(name) for name in _RUNTIME_DISTRIBUTIONS}
    return {
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "runtime": str(getattr(device.client, "platform_version", "unknown")),
        "xla_flags": " ".join(os.environ.get("XLA_FLAGS", "").split()),
        "libtpu_init_args": " ".join(os.environ.get("LIBTPU_INIT_ARGS", "").split()),
        "matmul_precision": str(jax.config.jax_default_matmul_precision),
        "x64": bool(jax.config.jax_enable_x64),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "flax": _version("flax"),
        "plugins": {name: v for name, v in plugins.items() if v is not None},
    }


def cache_key(fields: Mapping[str, Any]) -> str:
    """Stable hash of a JSON-able mapping (keys sorted)."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def dense_arm_fields(
    cfg: EvalConfig,
    identity: str,
    shift: float,
    *,
    devices: int | None = None,
    step_callback: bool = False,
    environment: Mapping[str, Any] | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """Everything that decides what the dense arm (and its noise floor) computes, JSON-able: the
    cache key's content (changing a name or value invalidates every cached dense arm).

    Left out, as the dense arms do not depend on them: the sparse ``schedule``, ``logger``,
    ``gate``, ``warm_runs`` (every run times afresh), ``max_minutes``, ``output_root``,
    ``cache_dir``, ``compile_cache`` (a program taken from it is the executable XLA compiled),
    ``fps``/``crf``, ``dry_run``, ``target``, ``resolution.name`` (its sizes are
    in), the checkpoint's path (its content is in ``identity``, so a copy still hits), the raw
    ``parallel.sequence`` (its resolved device count is in), ``parallel.distributed``,
    ``save_latents`` and ``progress`` (whether a step callback was in the loop is in).

    Args:
        cfg: the run's configuration, resolved for the platform.
        identity: the model's identity (preset and the content of every checkpoint part,
            ``Components.identity``).
        shift: the sampler's flow shift actually used.
        devices: devices the sequence is split over (default: ``parallel.sequence`` resolved by
            ``evalharness.assembly.sequence_devices``).
        step_callback: whether a per-step host callback was in the denoising loop (never in a
            timed loop; in the key so such a loop could not share an entry).
        environment: the environment's part (default: :func:`environment_fields`).
        code: the code version (default: :func:`code_version` of this repository).
    """
    return {
        "model": identity,
        # A hub checkpoint's commit (``model.revision`` once the run pinned it), beside the
        # content in ``identity``; None for a folder or a seeded preset.
        "checkpoint_revision": cfg.model.revision,
        "param_dtype": cfg.model.param_dtype,
        "dtype": cfg.dtype,
        "resolution": [cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width],
        "steps": cfg.steps,
        "sampler": cfg.sampler,
        "flow_shift": shift,
        "seed": cfg.seed,
        "prompt": cfg.prompt,
        "negative_prompt": cfg.negative_prompt,
        "guidance_scale": cfg.guidance_scale,
        "guidance_passes": cfg.guidance_passes,
        "kernel": dataclasses.asdict(cfg.kernel),
        "parallel": {
            "devices": sequence_devices(cfg) if devices is None else int(devices),
            "permute_placement": cfg.parallel.permute_placement,
        },
        "noise_floor": cfg.noise_floor,
        "step_callback": bool(step_callback),
        "code": code_version() if code is None else code,
        "environment": dict(environment_fields() if environment is None else environment),
    }


# The fields of the keys computed in this process, so that storing an entry can write its
# key.json and a miss can be explained without the caller passing the fields around.
_KEY_FIELDS: dict[str, dict[str, Any]] = {}
_KEY_FIELDS_KEPT = 64


def dense_arm_key(cfg: EvalConfig, identity: str, shift: float, **options: Any) -> str:
    """The cache key of a run's dense arm; the arguments are :func:`dense_arm_fields`'s.

    The fields are remembered for this key, so :func:`store_dense_arms` writes them as the entry's
    ``key.json`` and :func:`load_dense_arms` can say why a key missed.
    """
    fields = dense_arm_fields(cfg, identity, shift, **options)
    key = cache_key(fields)
    _KEY_FIELDS.pop(key, None)
    _KEY_FIELDS[key] = json.loads(json.dumps(fields, default=str))
    while len(_KEY_FIELDS) > _KEY_FIELDS_KEPT:
        _KEY_FIELDS.pop(next(iter(_KEY_FIELDS)))
    return key


def key_fields_of(key: str) -> dict[str, Any] | None:
    """The fields of a key :func:`dense_arm_key` computed in this process (JSON form), or None."""
    return _KEY_FIELDS.get(key)
