"""A damaged dense-cache entry costs one warning and a recomputation, found before any compile."""

import logging

import pytest

import evalharness.comparison.measured as measured_module
from evalharness.evidence import ArmCache
from evalharness.run import run
from tests.helpers.harness_config import small_config


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_a_bit_flipped_entry_is_set_aside_before_compiling_and_recomputed(
    tmp_path, monkeypatch, caplog
):
    overrides = ("logger=none", "noise_floor=false")
    first = run(small_config(tmp_path, *overrides))
    entries = tmp_path / "cache" / "dense_arms"
    arrays = entries / first["dense_cache_key"] / "arrays.npz"
    data = bytearray(arrays.read_bytes())
    data[len(data) // 2] ^= 0x01
    arrays.write_bytes(bytes(data))

    aside_at_compile = []
    prepare = measured_module.prepare_arms

    def recording(*args, **kwargs):
        aside_at_compile.append([p.name for p in entries.glob(".damaged-*")])
        return prepare(*args, **kwargs)

    monkeypatch.setattr(measured_module, "prepare_arms", recording)
    with caplog.at_level(logging.WARNING, logger="evalharness.evidence.dense_cache"):
        again = run(small_config(tmp_path, *overrides))
    (warning,) = caplog.records
    assert "arrays.npz does not match its checksum" in warning.getMessage()
    assert aside_at_compile and len(aside_at_compile[0]) == 1  # set aside before compiling
    assert again["dense_cache"] == "miss" and again["dense_cache_key"] == first["dense_cache_key"]
    assert ArmCache(entries).check(first["dense_cache_key"])  # recomputed, stored whole again
