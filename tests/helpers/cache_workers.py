"""Processes that write and read one dense-arm cache at once (``tests/evalharness/evidence/test_dense_cache_concurrency.py``).

Top-level functions, so ``multiprocessing``'s spawn start method can import them in a fresh
interpreter (no state shared with the test but the cache folder). Each reports through a queue:
``(name, None)`` when it finished cleanly, ``(name, traceback)`` when it raised.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from evalharness.evidence.dense_cache import ArmCache

# ~1 MB per entry: large enough that writing it takes a while, small enough for 2 cores.
SHAPE = (256, 256, 4)


def entry(key: str, writer: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What ``writer`` stores under ``key``: arrays and metadata that all name the writer, so a
    reader can tell one writer's complete entry from a mix of two."""
    value = np.float32(writer + 1)
    arrays = {"latents": np.full(SHAPE, value), "frames": np.full(SHAPE, writer + 1, np.uint8)}
    return arrays, {"key": key, "writer": writer}


def check_entry(key: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str | None:
    """Why a loaded entry is not one writer's complete entry; None when it is."""
    if meta.get("key") != key or meta.get("writer") not in (0, 1):
        return f"{key}: bad metadata {meta}"
    want, _ = entry(key, meta["writer"])
    for name, array in want.items():
        got = arrays.get(name)
        if got is None or got.shape != array.shape or not np.array_equal(got, array):
            return f"{key}: array {name} is not writer {meta['writer']}'s"
    return None


def store_same_keys(root: str, writer: int, keys: list[str], barrier, results) -> None:
    """Stores every key, meeting the other writer at ``barrier`` before each, so both store the
    same key at the same moment."""
    try:
        cache = ArmCache(Path(root))
        for key in keys:
            barrier.wait(timeout=60)
            arrays, meta = entry(key, writer)
            cache.store(key, arrays, meta, key_fields={"key": key})
        results.put((f"writer {writer}", None))
    except BaseException:  # noqa: BLE001 - the test reports it
        barrier.abort()  # the other writer stops waiting for this one
        results.put((f"writer {writer}", traceback.format_exc()))


def read_while_written(root: str, keys: list[str], results) -> None:
    """Loads every key over and over until all are present; each load must be a miss (no entry
    yet) or one writer's complete entry. A torn entry shows either as a mixed entry or as the
    cache's "ignoring unreadable cache entry" warning; both are reported as problems."""
    try:
        warnings = _WarningsSeen()
        logging.getLogger("evalharness.evidence.dense_cache").addHandler(warnings)
        cache = ArmCache(Path(root))
        seen: set[str] = set()
        problems: list[str] = []
        while len(seen) < len(keys) and not problems:
            for key in keys:
                loaded = cache.load(key)
                if loaded is not None:
                    seen.add(key)
                    if problem := check_entry(key, *loaded):
                        problems.append(problem)
            problems += warnings.messages
        results.put(("reader", "\n".join(problems) or None))
        results.put(("reader loads", cache.hits))
    except BaseException:  # noqa: BLE001 - the test reports it
        results.put(("reader", traceback.format_exc()))


class _WarningsSeen(logging.Handler):
    """Keeps the messages of warnings logged by the cache."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
