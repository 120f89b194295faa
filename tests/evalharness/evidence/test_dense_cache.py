"""Dense-arm cache: hits on the same key, misses on any change that matters (and only then), never
half-written, and says where a cached arm came from."""

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from evalharness.arms.arm import ArmResult
from evalharness.arms.timing import RunTimes
from evalharness.evidence.cache_key import cache_key, key_fields_of
from evalharness.evidence.dense_cache import (
    ArmCache,
    DenseArms,
    arm_meta,
    damage,
    load_dense_arms,
    store_dense_arms,
)
from tests.helpers.cache_key import (
    pinned_key,
    replace_field,
)

# ----------------------------------------------------------------------------- the store itself


def test_cache_hit_and_invalidation(tmp_path):
    cache = ArmCache(tmp_path)
    fields = {"model": "tiny-planted", "steps": 4, "seed": 1, "prompt": "fox"}
    key = cache_key(fields)
    assert cache.load(key) is None
    cache.store(key, {"latents": np.arange(6.0).reshape(2, 3)}, {"median_s": 1.5})
    arrays, meta = cache.load(key)
    np.testing.assert_array_equal(arrays["latents"], np.arange(6.0).reshape(2, 3))
    assert meta == {"median_s": 1.5}
    assert (cache.hits, cache.misses) == (1, 1)
    for change in ({"steps": 5}, {"seed": 2}, {"prompt": "owl"}):
        assert cache_key({**fields, **change}) != key
    assert cache_key(dict(reversed(list(fields.items())))) == key


def test_an_entry_is_on_disk_before_it_becomes_visible(tmp_path, monkeypatch):
    # Every file and the temporary folder are synced before the rename, the cache folder after.
    import evalharness.evidence.dense_cache as cache_module

    synced, renamed = [], []
    real_fsync, real_rename = cache_module.os.fsync, cache_module.os.rename

    def fsync(fd):
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), bool(renamed)))
        real_fsync(fd)

    def rename(src, dst):
        renamed.append(dst)
        real_rename(src, dst)

    monkeypatch.setattr(cache_module.os, "fsync", fsync)
    monkeypatch.setattr(cache_module.os, "rename", rename)
    cache = ArmCache(tmp_path)
    folder = cache.store("k", {"latents": np.zeros(3)}, {"m": 1}, key_fields={"seed": 1})
    before = {Path(path).name for path, after in synced if not after}
    assert {"arrays.npz", "meta.json", "key.json"} <= before
    assert any(name.startswith(".k-") for name in before)  # the temporary folder itself
    assert [Path(path) for path, after in synced if after] == [tmp_path]
    assert folder == cache.path("k") and cache.load("k") is not None


def test_a_stale_entry_is_replaced_only_after_it_is_discarded(tmp_path):
    cache = ArmCache(tmp_path)
    key = cache_key({"model": "tiny-planted"})
    cache.store(key, {"latents": np.zeros(3)}, {"run": "old"})
    cache.store(key, {"latents": np.ones(3)}, {"run": "new"})  # the first entry stays
    assert cache.load(key)[1] == {"run": "old"}
    cache.discard(key)
    assert cache.load(key) is None
    cache.store(key, {"latents": np.ones(3)}, {"run": "new"})
    assert cache.load(key)[1] == {"run": "new"}
    cache.discard("no-such-key")  # nothing to discard is not an error
    assert [p.name for p in tmp_path.iterdir()] == [key]


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _damaged_entry(tmp_path, name, spoil):
    cache = ArmCache(tmp_path)
    cache.store("k", {"x": np.arange(64.0)}, {"run": "old"}, key_fields={"seed": 1})
    spoil(tmp_path / "k" / name)
    return cache


@pytest.mark.parametrize("spoil", [_truncate, _flip_a_bit])
@pytest.mark.parametrize("name", ["arrays.npz", "meta.json", "key.json", "sha256.json"])
def test_a_damaged_entry_is_set_aside_with_one_warning_and_replaced(tmp_path, caplog, name, spoil):
    cache = _damaged_entry(tmp_path, name, spoil)
    with caplog.at_level(logging.WARNING, logger="evalharness.evidence.dense_cache"):
        assert cache.load("k") is None and cache.load("k") is None
    (warning,) = caplog.records
    assert "cache entry k is damaged" in warning.getMessage() and warning.levelname == "WARNING"
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith(".damaged-k-")]
    assert str(aside) in warning.getMessage()
    assert (aside / name).is_file()  # renamed, not deleted: kept for inspection
    assert cache.misses == 2 and cache.closest_differences({"seed": 1}) is None
    cache.store("k", {"x": np.ones(2)}, {"run": "new"})
    assert cache.load("k")[1] == {"run": "new"}


def test_check_sets_a_damaged_entry_aside_before_it_is_loaded(tmp_path, caplog):
    cache = _damaged_entry(tmp_path, "arrays.npz", _flip_a_bit)
    assert cache.check("no-such-key") is False
    with caplog.at_level(logging.WARNING, logger="evalharness.evidence.dense_cache"):
        assert cache.check("k") is False
        assert load_dense_arms(cache, "k") is None
    assert len(caplog.records) == 1 and "arrays.npz does not match its checksum" in caplog.text
    assert not cache.path("k").exists()


def test_whole_entries_pass_and_unvouched_ones_do_not(tmp_path):
    cache = ArmCache(tmp_path)
    cache.store("k", {"x": np.ones(2)}, {})
    assert cache.check("k") and cache.load("k") is not None
    assert damage(cache.path("k")) is None
    (cache.path("k") / "extra.txt").write_text("x")
    assert "unlisted: ['extra.txt']" in damage(cache.path("k"))
    (cache.path("k") / "extra.txt").unlink()
    (cache.path("k") / "meta.json").unlink()
    assert "missing: ['meta.json']" in damage(cache.path("k"))
    (cache.path("k") / "sha256.json").write_text("[1, 2]")
    assert "not a table of checksums" in damage(cache.path("k"))
    (cache.path("k") / "sha256.json").unlink()  # an entry nothing vouches for
    assert "no sha256.json" in damage(cache.path("k"))


# ----------------------------------------------------------------------------- entries and provenance


def _arm(label, value, timed):
    times = RunTimes((1.0, 2.0, 3.0), steps=2) if timed else None
    frames = np.full((1, 2, 2, 3), value, np.uint8)
    return ArmResult(label, np.full((1, 4), float(value)), times, 0.5, 0.25, frames, 0.125)


def test_dense_arms_round_trip_through_the_cache(tmp_path):
    cache = ArmCache(tmp_path)
    assert load_dense_arms(cache, "k") is None
    stored = DenseArms(_arm("dense", 1, True), _arm("noise_floor", 2, False), "k", hit=False)
    assert stored.metrics() == {"dense_cache": "miss", "dense_cache_key": "k"}
    store_dense_arms(cache, stored)
    loaded = load_dense_arms(cache, "k")
    assert loaded.hit and loaded.metrics()["dense_cache"] == "hit"
    for got, want in ((loaded.dense, stored.dense), (loaded.noise_floor, stored.noise_floor)):
        assert (got.label, got.times, got.compile_s, got.decode_s) == (
            want.label,
            want.times,
            want.compile_s,
            want.decode_s,
        )
        np.testing.assert_array_equal(got.frames, want.frames)
    store_dense_arms(cache, DenseArms(_arm("dense", 3, True), None, "k2", hit=False))
    assert load_dense_arms(cache, "k2").noise_floor is None


def test_entry_records_its_key_inputs_and_provenance(cfg, env, tmp_path, caplog):
    cache = ArmCache(tmp_path)
    key = pinned_key(cfg, env)
    fields = key_fields_of(key)
    assert cache_key(fields) == key
    computed = DenseArms(_arm("dense", 1, True), None, key, hit=False)
    assert computed.host and computed.created_at  # this host, now
    folder = store_dense_arms(cache, computed)
    assert json.loads((folder / "key.json").read_text()) == fields  # readable, beside the entry
    meta = json.loads((folder / "meta.json").read_text())
    assert (meta["key"], meta["created_at"], meta["host"]) == (
        key,
        computed.created_at,
        computed.host,
    )
    loaded = load_dense_arms(cache, key)
    assert loaded.provenance() == {
        "dense_cache": "hit",
        "dense_cache_key": key,
        "dense_created_at": computed.created_at,
        "dense_host": computed.host,
    }
    assert computed.provenance()["dense_cache"] == "miss"

    # A miss names the closest cached entry and what differs.
    other = pinned_key(replace_field(cfg, "seed", cfg.seed + 1), {**env, "xla_flags": "--x"})
    with caplog.at_level(logging.INFO, logger="evalharness.evidence.dense_cache"):
        assert load_dense_arms(cache, other) is None
    assert f"closest cached entry {key} differs in: environment.xla_flags, seed" in caplog.text
    assert cache.closest_differences(fields) == (key, [])


def test_entries_without_provenance_still_load(tmp_path):
    cache = ArmCache(tmp_path)
    arm = _arm("dense", 1, True)
    arrays = {"dense_latents": arm.latents, "dense_frames": arm.frames}
    cache.store("old", arrays, {"dense": arm_meta(arm), "noise_floor": None})  # no key.json
    loaded = load_dense_arms(cache, "old")
    assert loaded.provenance()["dense_created_at"] == "unknown"
    assert loaded.provenance()["dense_host"] == "unknown"
    assert cache.closest_differences({"seed": 1}) is None


def test_an_entry_is_reused_only_for_bit_identical_latents_of_the_same_arms():
    stored = DenseArms(_arm("dense", 1, True), _arm("noise_floor", 2, True), "k", hit=True)
    same = {"dense": _arm("dense", 1, False), "noise_floor": _arm("noise_floor", 2, False)}
    assert stored.holds(same) and stored.holds({"dense": same["dense"]})
    other = dict(same, noise_floor=_arm("noise_floor", 3, False))
    assert not stored.holds(other)
    nudged = _arm("dense", 1, False)
    nudged.latents = np.nextafter(nudged.latents, np.float32(2))
    assert not stored.holds({"dense": nudged})
    assert not DenseArms(_arm("dense", 1, True), None, "k", hit=True).holds(same)
