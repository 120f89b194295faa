"""On-disk cache of the dense arm, keyed by everything that affects its result.

A sweep over sparse schedules computes the dense control once; any change of model, weights,
resolution, steps, seed, prompts, guidance, dtype, dense executor or code gives a new key. The dense
arm's key, what is stored with it, and the hit/miss decision all live here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evalharness.arms import ArmResult
from evalharness.config import EvalConfig
from evalharness.timing import RunTimes

log = logging.getLogger(__name__)

# Packages whose source decides what the dense arm computes.
_CODE_PACKAGES = ("models", "kernels")


def code_version() -> str:
    """Hash of the model and kernel source files (works without git, changes with any edit)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in _CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(fields: Mapping[str, Any]) -> str:
    """Stable hash of a JSON-able mapping (keys sorted)."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class ArmCache:
    """A folder of cached arms: ``<root>/<key>/{arrays.npz, meta.json}``.

    Writes go to a temporary folder renamed into place, so a crash or a concurrent run never leaves a
    half-written entry that a later run would read.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def path(self, key: str) -> Path:
        """The folder of the entry stored under ``key``."""
        return self.root / key

    def load(self, key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """Returns (arrays, metadata) for a key, or None (a miss)."""
        folder = self.path(key)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            self.misses += 1
            return None
        try:
            meta = json.loads(meta_path.read_text())
            with np.load(folder / "arrays.npz") as data:
                arrays = {name: data[name] for name in data.files}
        except (OSError, ValueError) as err:
            log.warning("ignoring unreadable cache entry %s: %s", folder, err)
            self.misses += 1
            return None
        self.hits += 1
        return arrays, meta

    def store(self, key: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Path:
        """Saves an entry atomically and returns its folder."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.root))
        try:
            np.savez(tmp / "arrays.npz", **{k: np.asarray(v) for k, v in arrays.items()})
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
            final = self.path(key)
            if final.exists():  # another run stored the same key meanwhile; keep theirs
                shutil.rmtree(tmp)
            else:
                os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return self.path(key)


def dense_arm_fields(cfg: EvalConfig, identity: str, shift: float) -> dict[str, Any]:
    """Everything that decides what the dense arm (and its noise floor) computes.

    The names and values here are the cache key's content: changing any of them invalidates every
    cached dense arm, so they stay as they are unless the dense arm's result really depends on
    something new.

    Args:
        cfg: the run's configuration.
        identity: the model's identity (preset and weights), from the built components.
        shift: the sampler's flow shift actually used.

    Returns:
        The key's fields, JSON-able.
    """
    return {
        "model": identity,
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
        "kernel": dataclasses.asdict(cfg.kernel),
        "parallel": dataclasses.asdict(cfg.parallel),
        "warm_runs": cfg.warm_runs,
        "noise_floor": cfg.noise_floor,
        "code": code_version(),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
    }


def dense_arm_key(cfg: EvalConfig, identity: str, shift: float) -> str:
    """The cache key of a run's dense arm (see :func:`dense_arm_fields`)."""
    return cache_key(dense_arm_fields(cfg, identity, shift))


def arm_meta(arm: ArmResult) -> dict[str, Any]:
    """An arm's timings as JSON (cache metadata and ``timings.json``); arrays are stored apart."""
    return {
        "times": arm.times.to_json() if arm.times else None,
        "compile_s": arm.compile_s,
        "warmup_s": arm.warmup_s,
        "decode_s": arm.decode_s,
    }


def arm_from_cache(
    label: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
) -> ArmResult:
    """Rebuilds an arm stored by :func:`store_dense_arms`.

    Args:
        label: the arm's label, also the prefix of its arrays (``dense``, ``noise_floor``).
        arrays: the entry's arrays (``<label>_latents``, ``<label>_frames``).
        meta: the arm's metadata, as :func:`arm_meta` wrote it.
    """
    times = RunTimes.from_json(meta["times"]) if meta.get("times") else None
    return ArmResult(
        label,
        arrays[f"{label}_latents"],
        times,
        meta["compile_s"],
        meta["warmup_s"],
        arrays[f"{label}_frames"],
        meta["decode_s"],
    )


@dataclass
class DenseArms:
    """The dense arm and its optional dense-vs-dense noise floor, with where they came from.

    Attributes:
        dense: the dense arm, decoded.
        noise_floor: the second dense executor's arm, decoded (None when not run).
        key: the cache key they are stored under.
        hit: True when they were read from the cache rather than computed.
    """

    dense: ArmResult
    noise_floor: ArmResult | None
    key: str
    hit: bool

    def metrics(self) -> dict[str, str]:
        """Whether the dense arm was reused, and its key (run metrics)."""
        return {"dense_cache": "hit" if self.hit else "miss", "dense_cache_key": self.key}


def load_dense_arms(cache: ArmCache, key: str) -> DenseArms | None:
    """The cached dense arms under ``key``, or None on a miss."""
    cached = cache.load(key)
    if cached is None:
        log.info("dense arm: cache miss %s (computing)", key)
        return None
    arrays, meta = cached
    log.info("dense arm: cache hit %s (reused, not recomputed)", key)
    floor = None
    if meta.get("noise_floor"):
        floor = arm_from_cache("noise_floor", arrays, meta["noise_floor"])
    return DenseArms(arm_from_cache("dense", arrays, meta["dense"]), floor, key, hit=True)


def store_dense_arms(cache: ArmCache, arms: DenseArms) -> Path:
    """Stores freshly computed dense arms under their key and returns the entry's folder."""
    arrays = {"dense_latents": arms.dense.latents, "dense_frames": arms.dense.frames}
    meta: dict[str, Any] = {"dense": arm_meta(arms.dense), "noise_floor": None}
    if arms.noise_floor is not None:
        arrays.update(
            noise_floor_latents=arms.noise_floor.latents,
            noise_floor_frames=arms.noise_floor.frames,
        )
        meta["noise_floor"] = arm_meta(arms.noise_floor)
    return cache.store(arms.key, arrays, meta)
