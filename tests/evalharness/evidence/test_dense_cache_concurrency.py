"""The dense-arm cache shared by processes: two storing the same key at once leave one valid,
loadable entry and neither raises; a reader racing the writers never sees a torn entry.

Real processes (spawn start method: fresh interpreters sharing only the cache folder), meeting at
a barrier before each key so their stores collide. The same property at full scale, two harness
runs filling one dense entry, is in ``tests/e2e/test_team_tracking.py``.
"""

from __future__ import annotations

import multiprocessing
import queue

import pytest

from evalharness.evidence.dense_cache import ArmCache
from tests.helpers.cache_workers import check_entry, read_while_written, store_same_keys

KEYS = [f"key{i:02d}" for i in range(40)]


def _run(tmp_path, with_reader: bool) -> dict[str, object]:
    """Runs two writers of ``KEYS`` (and a reader) and returns what each reported."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    writers_meet = ctx.Barrier(2)
    root = str(tmp_path / "cache")
    procs = [
        ctx.Process(target=store_same_keys, args=(root, w, KEYS, writers_meet, results))
        for w in (0, 1)
    ]
    if with_reader:
        procs.append(ctx.Process(target=read_while_written, args=(root, KEYS, results)))
    for proc in procs:
        proc.start()
    reports: dict[str, object] = {}
    expected = 2 + (2 if with_reader else 0)
    try:
        while len(reports) < expected:
            name, report = results.get(timeout=120)
            reports[name] = report
    except queue.Empty:
        reports["timeout"] = f"only {sorted(reports)} reported within 120 s"
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    return reports


def _assert_clean(reports: dict[str, object], names: tuple[str, ...]) -> None:
    failed = {name: reports.get(name, "did not report") for name in names if reports.get(name, 1)}
    failed.update({k: v for k, v in reports.items() if k not in names})
    assert not failed, "\n\n".join(f"{name}:\n{report}" for name, report in failed.items())


def _assert_one_valid_entry_per_key(tmp_path) -> None:
    cache = ArmCache(tmp_path / "cache")
    for key in KEYS:
        loaded = cache.load(key)
        assert loaded is not None, key
        assert check_entry(key, *loaded) is None
        assert cache.key_fields(key) == {"key": key}
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temporary folders left behind: {leftovers}"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == KEYS


@pytest.mark.slow  # several processes: about 6 s on 2 cores
def test_two_processes_storing_the_same_keys_leave_one_valid_entry_each(tmp_path):
    reports = _run(tmp_path, with_reader=False)
    _assert_clean(reports, ("writer 0", "writer 1"))
    _assert_one_valid_entry_per_key(tmp_path)


@pytest.mark.slow  # several processes: about 8 s on 2 cores
def test_a_reader_racing_the_writers_never_sees_a_torn_entry(tmp_path):
    reports = _run(tmp_path, with_reader=True)
    loads = reports.pop("reader loads", 0)
    _assert_clean(reports, ("writer 0", "writer 1", "reader"))
    assert loads >= len(KEYS)  # it did read every entry, each one complete
    _assert_one_valid_entry_per_key(tmp_path)
