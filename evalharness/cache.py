"""On-disk cache of the dense arm, keyed by everything that affects its result.

A sweep over sparse schedules computes the dense control once; any change of model, weights,
resolution, steps, seed, prompts, guidance, dtype, dense executor or code gives a new key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

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
