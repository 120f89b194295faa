"""JAX's persistent compilation cache for a run, a benchmark and a search, and the count of the
programs a run took from it.

XLA's compiled programs are written under ``<cache_dir>/jax_compile`` (or the folder that
``JAX_COMPILATION_CACHE_DIR`` names, when the environment sets it), so a later process that
compiles the same program (the same computation, shapes, devices, compile options, XLA flags
and jaxlib) loads it instead: a second job with the same ``cache_dir`` skips most of its
compiles. A loaded program is the very executable XLA built before, so no result changes.
``compile_cache=false`` runs without it.

The count comes from JAX's monitoring events: every program handed to XLA (compiled or taken
from the cache), every program taken from the cache, every program written to it. JAX writes
neither a program with a host callback (the routing-recording loop) nor, in a run of several
processes, one compiled by a process other than process 0; those are compiled every time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from evalharness.metric_names import COMPILE_CACHE_HITS, COMPILE_CACHE_MISSES

log = logging.getLogger(__name__)

# The cache's folder under ``cache_dir``, and the environment variable (JAX's own) that names
# another folder instead.
FOLDER = "jax_compile"
ENV_FOLDER = "JAX_COMPILATION_CACHE_DIR"

# JAX's events (jax/_src/dispatch.py, jax/_src/compiler.py): one per program handed to XLA,
# taken from the cache or not (a duration event); one per program taken from the cache; one
# per program written to it (JAX names a write a "miss"; a program it does not write records
# none).
REQUESTED = "/jax/core/compile/backend_compile_duration"
TAKEN = "/jax/compilation_cache/cache_hits"
WRITTEN = "/jax/compilation_cache/cache_misses"


@dataclass(frozen=True)
class CompileCacheSummary:
    """What the compilation cache did since it was last enabled (:func:`enable`).

    Attributes:
        folder: the cache's folder, or None when the cache was off.
        programs: programs handed to XLA, compiled or taken from the cache.
        from_cache: programs taken from the cache.
        written: programs written to the cache.
    """

    folder: str | None
    programs: int
    from_cache: int
    written: int

    @property
    def compiled(self) -> int:
        """Programs XLA compiled (not found in the cache, or the cache was off)."""
        return self.programs - self.from_cache

    def as_metrics(self) -> dict[str, int]:
        """``compile_cache_hits`` (taken from the cache) and ``compile_cache_misses``
        (compiled)."""
        return {COMPILE_CACHE_HITS: self.from_cache, COMPILE_CACHE_MISSES: self.compiled}

    def line(self) -> str:
        """One line for the log, e.g. ``compilation cache: 7 of 9 programs taken from <dir>``."""
        if self.folder is None:
            return f"compilation cache: off; {self.programs} programs compiled"
        return (
            f"compilation cache: {self.from_cache} of {self.programs} programs taken from "
            f"{self.folder} ({self.compiled} compiled, {self.written} written)"
        )


class _Counts:
    """Running totals of :data:`REQUESTED`, :data:`TAKEN` and :data:`WRITTEN` in this process
    (compiles may run on other threads than the main one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = dict.fromkeys((REQUESTED, TAKEN, WRITTEN), 0)

    def event(self, event: str, *_args: object, **_kwargs: object) -> None:
        if event in self._totals:
            with self._lock:
                self._totals[event] += 1

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self._totals[REQUESTED], self._totals[TAKEN], self._totals[WRITTEN]


_counts: _Counts | None = None
# The folder the last :func:`enable` chose (None: off) and the totals at that moment.
_folder: Path | None = None
_since: tuple[int, int, int] = (0, 0, 0)


def _listening() -> _Counts:
    """The process's counts, listening to JAX's events from the first call on (JAX keeps its
    listeners for the process's life, so they are registered once)."""
    global _counts
    if _counts is None:
        _counts = _Counts()
        jax.monitoring.register_event_listener(_counts.event)
        jax.monitoring.register_event_duration_secs_listener(_counts.event)
    return _counts


def cache_folder(cache_dir: str | Path) -> Path:
    """Where the cache is kept: ``JAX_COMPILATION_CACHE_DIR`` when the environment names a
    folder, else ``<cache_dir>/jax_compile``; absolute."""
    named = os.environ.get(ENV_FOLDER)
    return Path(named or Path(cache_dir) / FOLDER).absolute()


def enable(cache_dir: str | Path, *, on: bool = True) -> Path | None:
    """Turns JAX's persistent compilation cache on (or, with ``on=False``, off) for what this
    process compiles from now on, and starts the count :func:`summary` reports.

    Idempotent, and it may come after some programs were compiled: JAX opens (and creates) the
    cache's folder at the first compile that uses it, and a change of folder or of on/off resets
    JAX's cache object so the next compile opens the new one. Every program is written, however
    quick its compile or small its executable: the tiny model's compiles take well under JAX's
    default one second. Whether the folder can be written is preflight's question
    (``evalharness.admission.check_compile_cache``): JAX itself only warns once and goes on
    without the cache.

    Args:
        cache_dir: the run's ``cache_dir``; the cache goes under it (:func:`cache_folder`).
        on: ``compile_cache``; False turns JAX's cache off, even one the environment names.

    Returns:
        The cache's folder, or None when off.
    """
    global _folder, _since
    counts = _listening()
    folder = cache_folder(cache_dir) if on else None
    was_on = bool(jax.config.jax_enable_compilation_cache)
    was_folder = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_enable_compilation_cache", on)
    if folder is not None:
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no minimum
    # JAX decides once per process whether compiles use the cache, and opens its folder once.
    moved = folder is not None and was_folder not in (None, str(folder))
    if was_on != on or moved:
        with _quiet(jax_cache.reset_cache.__module__):  # it logs every reset at INFO
            jax_cache.reset_cache()
    _folder, _since = folder, counts.snapshot()
    return folder


def summary() -> CompileCacheSummary:
    """What the cache did since the last :func:`enable` (all zeros before any)."""
    requested, taken, written = _listening().snapshot()
    before = _since
    return CompileCacheSummary(
        folder=None if _folder is None else str(_folder),
        programs=requested - before[0],
        from_cache=taken - before[1],
        written=written - before[2],
    )


def report() -> CompileCacheSummary:
    """:func:`summary`, with its line logged: what a run says at its end."""
    done = summary()
    log.info("%s", done.line())
    return done


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """``logger_name``'s INFO lines held back for the block."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
