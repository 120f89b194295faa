"""libtpu is kept off a machine without TPU chips: the settings, the PCI probe, and a fresh process
that imports the harness first."""

import os
import subprocess
import sys

import pytest

from models.accelerator_env import (
    COMPILE_ONLY_HOST,
    GOOGLE_PCI_VENDOR,
    guard_settings,
    nvidia_gpu_visible,
    tpu_chips_attached,
)
from tests.helpers.paths import REPO_ROOT

SHARED = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", **COMPILE_ONLY_HOST}


def _pci(tmp_path, devices):
    for i, (vendor, device) in enumerate(devices):
        folder = tmp_path / f"0000:00:{i:02x}.0"
        folder.mkdir()
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    return tmp_path


def test_only_tpu_chips_count_not_other_google_devices(tmp_path):
    # gVNIC (0x0042) and persistent-disk NVMe (0x001f) share Google's vendor ID; v6e is 0x006f.
    pci = _pci(
        tmp_path,
        [
            (GOOGLE_PCI_VENDOR, "0x0042"),
            (GOOGLE_PCI_VENDOR, "0x001f"),
            ("0x10de", "0x2335"),
            (GOOGLE_PCI_VENDOR, "0x006f"),
            (GOOGLE_PCI_VENDOR, "0x006f"),
        ],
    )
    assert tpu_chips_attached(pci) == 2
    (tmp_path / "empty").mkdir()
    assert tpu_chips_attached(tmp_path / "empty") == 0
    assert tpu_chips_attached(tmp_path / "missing") == 0


@pytest.mark.parametrize(
    "chips, libtpu, nvidia, environ, expected",
    [
        (0, True, False, {}, {**SHARED, "TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu"}),
        (0, True, True, {}, {**SHARED, "TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cuda,cpu"}),
        (0, False, False, {}, {"TPU_SKIP_MDS_QUERY": "1"}),
        (0, True, False, {"JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1", **SHARED}, {}),
        (0, True, False, {"JAX_PLATFORMS": "cuda"}, {**SHARED, "TPU_SKIP_MDS_QUERY": "1"}),
        (4, True, False, {}, {}),  # a TPU host: JAX must find its chips
    ],
    ids=["libtpu-cpu", "libtpu-gpu", "no-libtpu", "already-set", "user-platforms", "tpu-host"],
)
def test_guard_settings(chips, libtpu, nvidia, environ, expected):
    got = guard_settings(tpu_chips=chips, libtpu=libtpu, nvidia_gpu=nvidia, environ=environ)
    assert got == expected


@pytest.mark.skipif(tpu_chips_attached() > 0, reason="a TPU host: the guard rightly sets nothing")
def test_importing_the_harness_sets_both_before_jax_loads(tmp_path):
    # A stand-in libtpu package (importable, never imported): the guard only looks it up. The child
    # starts without either variable and must have both, with JAX not yet loaded, after
    # ``import evalharness``; then JAX's own config reads JAX_PLATFORMS=cpu.
    (tmp_path / "libtpu").mkdir()
    (tmp_path / "libtpu" / "__init__.py").write_text("raise ImportError('stand-in: never load')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TPU_SKIP_MDS_QUERY")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT)])
    code = (
        "import os, sys; import evalharness; "
        "assert 'jax' not in sys.modules; "
        "print(os.environ['JAX_PLATFORMS'], os.environ['TPU_SKIP_MDS_QUERY']); "
        "import jax; print(jax.config.jax_platforms)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    platforms = guard_settings(
        tpu_chips=0, libtpu=True, nvidia_gpu=nvidia_gpu_visible(), environ={}
    )
    expected = platforms["JAX_PLATFORMS"]
    assert out.stdout.split() == [expected, "1", expected]


def test_with_the_cuda_plugin_and_no_gpu_jax_stays_on_the_cpu():
    # The gpu-compile extra on a machine without a GPU: compile for an H200, never initialise one.
    got = guard_settings(tpu_chips=0, libtpu=False, nvidia_gpu=False, environ={}, cuda_plugin=True)
    assert got == {"TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu"}
    beside_a_gpu = guard_settings(
        tpu_chips=0, libtpu=False, nvidia_gpu=True, environ={}, cuda_plugin=True
    )
    assert "JAX_PLATFORMS" not in beside_a_gpu


@pytest.mark.slow
@pytest.mark.skipif(tpu_chips_attached() > 0, reason="a TPU host: the guard rightly sets nothing")
def test_a_compile_only_libtpu_process_starts_without_libtpu_noise():
    # The real libtpu: describing both topologies after `import evalharness` prints nothing of
    # libtpu's start-up (host bounds, InitGoogle, the worker-hostname trace) on stderr.
    pytest.importorskip("libtpu")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "JAX_PLATFORMS"))}
    code = (
        "import evalharness; from evalharness.estimates import topology_compiler; "
        "print(topology_compiler('v6e:2x4').chips, topology_compiler('v6e:1x1').chips)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["8", "1"]
    for noise in ("host bounds", "InitGoogle", "TPU_WORKER_HOSTNAMES", "E0000"):
        assert noise not in out.stderr, out.stderr[-2000:]
