"""On-disk cache of the dense arms' decoded frames, under the key of ``evalharness.evidence.cache_key``:
what an entry stores, the hit/miss decision, the explanation of a miss, and the setting aside of a
damaged entry: one whose files do not match the SHA-256 checksums recorded when it was written
(``sha256.json``; a changed, missing or extra file, a damaged ``sha256.json`` and none at all,
since nothing then vouches for the entry).
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalharness.arms import ArmResult, RunTimes
from evalharness.evidence.cache_key import key_fields_of

log = logging.getLogger(__name__)

CHECKSUMS = "sha256.json"


def _digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name != CHECKSUMS}


def write_checksums(folder: Path) -> None:
    """Records the SHA-256 of every file in ``folder`` in its ``sha256.json``."""
    sums = {name: _digest(folder / name) for name in sorted(_files(folder))}
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=2, sort_keys=True))


def damage(folder: Path) -> str | None:
    """What is wrong with the entry in ``folder``, or None when every file matches its checksum.

    Raises:
        FileNotFoundError: ``folder`` is gone (another process set it aside meanwhile).
    """
    try:
        recorded = json.loads((folder / CHECKSUMS).read_text())
    except FileNotFoundError:
        if not folder.is_dir():
            raise
        return f"it has no {CHECKSUMS}"
    except (OSError, ValueError) as err:
        return f"its {CHECKSUMS} is unreadable ({err})"
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        return f"its {CHECKSUMS} is not a table of checksums"
    present = _files(folder)
    if present != set(recorded):
        missing, extra = sorted(set(recorded) - present), sorted(present - set(recorded))
        return f"its files differ from {CHECKSUMS} (missing: {missing}, unlisted: {extra})"
    for name in sorted(recorded):
        try:
            if _digest(folder / name) != recorded[name]:
                return f"{name} does not match its checksum"
        except OSError as err:
            return f"{name} is unreadable ({err})"
    return None


class ArmCache:
    """A folder of cached arms: ``<root>/<key>/{arrays.npz, meta.json, key.json, sha256.json}``.

    ``key.json`` holds the key's inputs, readable, so a miss can be explained
    (:meth:`closest_differences`); entries without one are still read. A damaged entry
    (:func:`damage`) is set aside with one warning and counts as a miss: the arms are computed
    afresh.

    Writes go to a temporary folder renamed into place, so a crash or a concurrent run never
    leaves a half-written entry; when processes store the same key at once, the first rename
    wins and the others discard theirs.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def path(self, key: str) -> Path:
        """The folder of the entry stored under ``key``."""
        return self.root / key

    def check(self, key: str) -> bool:
        """Whether an entry under ``key`` exists and is whole; a damaged one is set aside (renamed
        to ``<root>/.damaged-<key>-<pid>-<time>``, kept for inspection) with one warning line."""
        folder = self.path(key)
        if not folder.is_dir():
            return False
        try:
            problem = damage(folder)
        except FileNotFoundError:
            return False  # set aside by another process meanwhile
        if problem is None:
            return True
        aside = folder.with_name(f".damaged-{key}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            return False
        except OSError as err:
            log.warning(
                f"dense arm: cache entry {folder} is damaged ({problem}) and cannot be set aside "
                f"({err}); computing the arms without it"
            )
            return False
        log.warning(
            f"dense arm: cache entry {key} is damaged ({problem}); set aside as {aside}, "
            "computing the arms afresh"
        )
        return False

    def load(self, key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """Returns (arrays, metadata) for a key, or None (a miss: no entry, or a damaged one,
        which :meth:`check` sets aside)."""
        folder = self.path(key)
        if not self.check(key):
            self.misses += 1
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text())
            with np.load(folder / "arrays.npz") as data:
                arrays = {name: data[name] for name in data.files}
        except (OSError, ValueError) as err:
            log.warning("ignoring unreadable cache entry %s: %s", folder, err)
            self.misses += 1
            return None
        self.hits += 1
        return arrays, meta

    def discard(self, key: str) -> None:
        """Removes the entry under ``key`` (a stale one), if any: renamed aside first, so a
        concurrent reader sees the whole entry or none, then deleted."""
        folder = self.path(key)
        aside = folder.with_name(f".discard-{key}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            return
        shutil.rmtree(aside, ignore_errors=True)

    def key_fields(self, key: str) -> dict[str, Any] | None:
        """The inputs of the key an entry was stored under (its ``key.json``), or None."""
        try:
            return json.loads((self.path(key) / "key.json").read_text())
        except (OSError, ValueError):
            return None

    def closest_differences(self, fields: Mapping[str, Any]) -> tuple[str, list[str]] | None:
        """The stored entry whose ``key.json`` differs from ``fields`` in the fewest inputs, and
        those inputs (dotted names, e.g. ``environment.xla_flags``); None without any entry."""
        if not self.root.is_dir():
            return None
        wanted = _flatten(json.loads(json.dumps(fields, default=str)))
        best: tuple[str, list[str]] | None = None
        for folder in sorted(self.root.iterdir()):
            stored = None if folder.name.startswith(".") else self.key_fields(folder.name)
            if stored is None:
                continue
            have = _flatten(stored)
            differ = sorted(k for k in wanted.keys() | have.keys() if wanted.get(k) != have.get(k))
            if best is None or len(differ) < len(best[1]):
                best = (folder.name, differ)
        return best

    def store(
        self,
        key: str,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        key_fields: Mapping[str, Any] | None = None,
    ) -> Path:
        """Saves an entry atomically and returns its folder; ``key_fields`` (the key's inputs)
        go to its ``key.json``."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.root))
        try:
            np.savez(tmp / "arrays.npz", **{k: np.asarray(v) for k, v in arrays.items()})
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
            if key_fields is not None:
                (tmp / "key.json").write_text(
                    json.dumps(key_fields, indent=2, sort_keys=True, default=str)
                )
            write_checksums(tmp)
            _sync(tmp)  # the files' bytes reach the disk before the rename makes them visible
            try:
                # rename(2) is atomic: readers see no entry or a whole one. No exists() check
                # first: two processes can both pass it, and the second rename then fails.
                os.rename(tmp, self.path(key))
                _sync(self.root, files=False)  # and the rename itself survives a crash
            except OSError as err:
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                # Another process stored the same key meanwhile (the same inputs): keep theirs.
                shutil.rmtree(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return self.path(key)


def _sync(folder: Path, *, files: bool = True) -> None:
    """fsync(2) of ``folder``'s files (unless ``files`` is False) and of the folder itself, so a
    power loss cannot leave a renamed entry whose files are empty."""
    paths = [p for p in folder.iterdir() if p.is_file()] if files else []
    for path in [*paths, folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{dotted.name: leaf}``."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for name, value in tree.items():
        out.update(_flatten(value, f"{prefix}.{name}" if prefix else str(name)))
    return out


def arm_meta(arm: ArmResult) -> dict[str, Any]:
    """An arm's timings as JSON (cache metadata and ``timings.json``); arrays are stored apart."""
    return {
        "times": arm.times.to_json() if arm.times else None,
        "compile_s": arm.compile_s,
        "warmup_s": arm.warmup_s,
        "decode_s": arm.decode_s,
    }


def _arm_from_cache(
    label: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
) -> ArmResult:
    """The arm ``label`` stored by :func:`store_dense_arms`: its arrays ``<label>_latents`` and
    ``<label>_frames``, its metadata as :func:`arm_meta` wrote it."""
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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass
class DenseArms:
    """The dense arm and its optional dense-vs-dense noise floor, with where they came from.

    Attributes:
        dense: the dense arm, decoded.
        noise_floor: the second dense executor's arm, decoded (None when not run).
        key: the cache key they are stored under.
        hit: True when they were read from the cache rather than computed.
        created_at: when they were computed (UTC, ISO 8601): when this object was made, or what
            the cache entry recorded (None for entries from before it was recorded).
        host: the host name of the machine that computed them (None as for ``created_at``).
    """

    dense: ArmResult
    noise_floor: ArmResult | None
    key: str
    hit: bool
    created_at: str | None = field(default_factory=_now)
    host: str | None = field(default_factory=socket.gethostname)

    def metrics(self) -> dict[str, str]:
        """Whether the dense arm was reused, and its key (run metrics)."""
        return {"dense_cache": "hit" if self.hit else "miss", "dense_cache_key": self.key}

    def holds(self, fresh: Mapping[str, ArmResult]) -> bool:
        """Whether this entry's arms are the ones a run just computed: the same arms ("dense",
        optionally "noise_floor") with bit-identical latents. Only then are its frames reused."""
        pairs = [(self.dense, fresh["dense"])]
        if "noise_floor" in fresh:
            if self.noise_floor is None:
                return False
            pairs.append((self.noise_floor, fresh["noise_floor"]))
        return all(
            a.latents.shape == b.latents.shape and np.array_equal(a.latents, b.latents)
            for a, b in pairs
        )

    def provenance(self) -> dict[str, str]:
        """:meth:`metrics` plus ``dense_created_at`` and ``dense_host`` (``unknown`` where not
        recorded), as run tags."""
        return {
            **self.metrics(),
            "dense_created_at": self.created_at or "unknown",
            "dense_host": self.host or "unknown",
        }


def load_dense_arms(cache: ArmCache, key: str) -> DenseArms | None:
    """The cached dense arms under ``key``, or None on a miss.

    On a miss of a key computed by :func:`dense_arm_key` in this process, the log names the
    closest stored entry and the key inputs it differs in.
    """
    cached = cache.load(key)
    if cached is None:
        log.info("dense arm: cache miss %s (computing)%s", key, _explain_miss(cache, key))
        return None
    arrays, meta = cached
    created = meta.get("created_at", "at an unrecorded time")
    host = meta.get("host", "an unrecorded host")
    log.info(
        f"dense arm: cache hit {key} (its decoded frames are reused if this run's latents match; "
        f"computed {created} on {host})"
    )
    floor = None
    if meta.get("noise_floor"):
        floor = _arm_from_cache("noise_floor", arrays, meta["noise_floor"])
    return DenseArms(
        _arm_from_cache("dense", arrays, meta["dense"]),
        floor,
        key,
        hit=True,
        created_at=meta.get("created_at"),
        host=meta.get("host"),
    )


def _explain_miss(cache: ArmCache, key: str) -> str:
    fields = key_fields_of(key)
    closest = cache.closest_differences(fields) if fields is not None else None
    if closest is None:
        return ""
    other, differ = closest
    return f"; closest cached entry {other} differs in: {', '.join(differ) or 'nothing'}"


def store_dense_arms(
    cache: ArmCache, arms: DenseArms, key_fields: Mapping[str, Any] | None = None
) -> Path:
    """Stores freshly computed dense arms (with their key, ``created_at`` and ``host``) under
    their key and returns the entry's folder; ``key_fields`` (default: those :func:`dense_arm_key`
    computed for ``arms.key`` in this process) go to its ``key.json``."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {
        "noise_floor": None,
        "key": arms.key,
        "created_at": arms.created_at,
        "host": arms.host,
    }
    for label, arm in (("dense", arms.dense), ("noise_floor", arms.noise_floor)):
        if arm is not None:
            arrays.update({f"{label}_latents": arm.latents, f"{label}_frames": arm.frames})
            meta[label] = arm_meta(arm)
    if key_fields is None:
        key_fields = key_fields_of(arms.key)
    return cache.store(arms.key, arrays, meta, key_fields=key_fields)
