"""Sequence parallelism: bad input on one device, exchange byte counts, and the 8-device suite.

The multi-device tests live in ``tests/kernels/test_sp_multidevice.py``; they need 8 CPU devices, which
``XLA_FLAGS`` must request before JAX starts, so this file runs them in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from kernels.parallel.attend import SequenceParallelAttend, parallelize
from kernels.parallel.exchange import exchange_bytes, padded_heads
from kernels.parallel.mesh import (
    check_same_config,
    config_digest,
    describe_mesh,
    initialize_distributed,
    make_mesh,
)
from models.attention import dense_attention

ROOT = Path(__file__).resolve().parents[2]


def test_a_mesh_larger_than_the_devices_names_both_numbers():
    available = jax.device_count()
    with pytest.raises(ValueError, match=rf"{available + 1} devices.*only {available}"):
        make_mesh(available + 1)


@pytest.mark.parametrize("sequence", [-1, 1.5, True, "8"])
def test_a_malformed_device_count_is_rejected(sequence):
    with pytest.raises(ValueError, match="parallel.sequence"):
        make_mesh(sequence)


def test_default_mesh_takes_every_device():
    mesh = make_mesh(None)
    assert mesh.axis_names == ("seq",) and mesh.shape["seq"] == jax.device_count()
    assert make_mesh(0).shape["seq"] == jax.device_count()
    info = describe_mesh(mesh)
    assert info["mesh_axes"] == f"seq={jax.device_count()}" and info["mesh_processes"] == 1


def test_bad_placement_and_mesh_are_rejected():
    mesh = make_mesh(1)
    with pytest.raises(ValueError, match="placement='after'"):
        SequenceParallelAttend(dense_attention, mesh, placement="after")
    other = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    with pytest.raises(ValueError, match="lack 'seq'"):
        SequenceParallelAttend(dense_attention, other)
    with pytest.raises(ValueError, match="AttentionPolicy"):
        SequenceParallelAttend(dense_attention, mesh, policy=dense_attention)
    assert parallelize(None, mesh) is None


def test_partial_launcher_environment_fails_before_initialising():
    env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2"}
    with pytest.raises(ValueError, match="JAX_PROCESS_ID is not"):
        initialize_distributed(env=env)
    with pytest.raises(ValueError, match="JAX_PROCESS_ID=2"):
        initialize_distributed(env={**env, "JAX_PROCESS_ID": "2"})
    assert initialize_distributed(env={}) is False  # a plain single-process run
    assert initialize_distributed(False, env=env) is False


def test_config_hash_check():
    assert not np.array_equal(config_digest("steps: 50"), config_digest("steps: 40"))
    np.testing.assert_array_equal(config_digest("a"), config_digest("a"))
    check_same_config({"steps": "50"})  # one process: nothing to disagree with


def test_exchange_bytes_by_hand():
    # B=1, N=16, H=4 padded to 8 on 8 devices, D=2, float32: one tensor is 16*8*2*4 = 1024 bytes.
    assert padded_heads(4, 8) == 8 and padded_heads(40, 8) == 40 and padded_heads(12, 8) == 16
    local = exchange_bytes(1, 16, 4, 2, 4, 8, "head_local", samples=2)
    assert local["all_to_all"] == 4 * 1024 * 7 // 8
    assert local["all_gather"] == 0
    rows, stats = 1 * 2 * 4 * 2 * 4, 1 * 4 * 2 * 4  # [B, R, H, D] and [B, H, R] float32
    assert local["routing"] == 2 * 7 * (4 * rows + 6 * stats)
    before = exchange_bytes(1, 16, 4, 2, 4, 8, "before_exchange", samples=2)
    assert before["all_gather"] == 4 * 7 * (16 * 4 * 2 * 4)  # unpadded q, k, v and out
    assert before["total"] == local["total"] + before["all_gather"]


@pytest.mark.slow  # end to end: run by .ci/run's second step (pytest -m slow)
def test_eight_device_suite():
    if jax.device_count() >= 8:
        pytest.skip("this process already has 8 devices: pytest runs test_sp_multidevice.py")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",  # one process: its 8 host devices are what the file tests
            "-m",
            "",  # every test of the file, its slow ones too: this whole suite is already slow
            "tests/kernels/test_sp_multidevice.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "passed" in summary and "skipped" not in summary, summary
