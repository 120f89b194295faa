"""Dense-arm cache: hits on the same key, misses on any change, never half-written."""

import numpy as np

from evalharness.cache import ArmCache, cache_key, code_version


def test_cache_hit_and_invalidation(tmp_path):
    cache = ArmCache(tmp_path)
    fields = {"model": "tiny", "steps": 4, "seed": 1, "prompt": "fox"}
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


def test_unreadable_entry_is_a_miss(tmp_path):
    cache = ArmCache(tmp_path)
    cache.store("k", {"x": np.ones(2)}, {})
    (tmp_path / "k" / "arrays.npz").write_bytes(b"garbage")
    assert cache.load("k") is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_code_version_is_stable():
    assert code_version() == code_version() and len(code_version()) == 16
