"""Shared pytest configuration: CPU-only JAX, float32 matmuls at full precision."""

import os

# Tests always run on the CPU; a developer's accelerator must not change the numbers. With libtpu
# installed (the ``tpu`` extra, for compiling for TPU topologies), both settings also keep libtpu
# from initialising a TPU or querying a cloud metadata server, in this process and in every
# subprocess a test starts (they inherit the environment).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile-only: no chip to share
# No test reaches the Hugging Face hub: hub checkpoints are tested on caches built on disk.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

# One persistent compilation cache for the session, subprocesses included (they inherit the
# environment): many tests compile the same toy denoising loops, and a cache hit returns the very
# executable XLA built before, so results are unchanged. Fresh per session, removed at exit, so no
# run ever reads an executable another checkout compiled.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="evalharness-tests-jax-cache-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import signal  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402

from models import interruption  # noqa: E402

_HANDLED = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def _signal_handlers_restored(request):
    """Each test starts with the SIGINT / SIGTERM handlers the session started with and no signal
    noted (``models.interruption``): a test that runs a command in-process (which installs its
    own handlers) must not change how a later test sees Ctrl-C. A test that leaves the handlers
    changed is named in a warning."""
    before = {sig: signal.getsignal(sig) for sig in _HANDLED}
    yield
    interruption.clear()  # a signal a test delivered (or noted) is not a later test's
    for sig, handler in before.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
            warnings.warn(
                f"{request.node.nodeid} left the {sig.name} handler changed; restored",
                stacklevel=1,
            )
