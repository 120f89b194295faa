"""Dense-arm cache: hits on the same key, misses on any change, never half-written."""

import json

import numpy as np

from evalharness import kernel_choice
from evalharness.arms import ArmResult
from evalharness.cache import (
    ArmCache,
    DenseArms,
    cache_key,
    code_version,
    dense_arm_fields,
    dense_arm_key,
    load_dense_arms,
    store_dense_arms,
)
from evalharness.config import to_config
from evalharness.timing import RunTimes
from tests.helpers.harness_config import small_config


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


def test_dense_arm_key_fields_are_stable(tmp_path):
    # Existing caches stay valid only while the key's fields keep their names and values. The key
    # is taken on the config resolved for the platform (what the run actually computes).
    cfg = kernel_choice.resolve(to_config(small_config(tmp_path)), "cpu")
    fields = dense_arm_fields(cfg, "tiny|seed=0", 3.0)
    assert list(fields) == [
        "model",
        "param_dtype",
        "dtype",
        "resolution",
        "steps",
        "sampler",
        "flow_shift",
        "seed",
        "prompt",
        "negative_prompt",
        "guidance_scale",
        "kernel",
        "parallel",
        "warm_runs",
        "noise_floor",
        "code",
        "jax",
        "device",
    ]
    as_json = json.loads(json.dumps(fields, default=str))
    assert as_json["resolution"] == [33, 64, 64]
    assert as_json["kernel"] == {
        "backend": "xla",
        "block_q": 8,
        "block_kv": 8,
        "block_kv_compute": None,
        "vmem_limit_bytes": None,
        "num_warps": None,
        "num_stages": None,
        "dense_executor": "b0",
        "noise_floor_executor": "dot_product_attention",
    }
    assert as_json["parallel"] == {"sequence": 0, "permute_placement": "head_local"}
    assert (as_json["sampler"], as_json["dtype"], as_json["param_dtype"]) == (
        "unipc",
        "float32",
        "float32",
    )
    assert dense_arm_key(cfg, "tiny|seed=0", 3.0) == cache_key(fields)
    assert dense_arm_key(cfg, "tiny|seed=1", 3.0) != cache_key(fields)


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
