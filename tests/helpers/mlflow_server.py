"""A real ``mlflow server`` on 127.0.0.1 for integration tests (sqlite store, served artifacts)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlflow_server(folder: Path, *, startup_s: float = 90.0) -> Iterator[str]:
    """Starts ``mlflow server`` with its database and artifacts under ``folder``; yields its URL
    once ``/health`` answers, and stops its whole process group (it spawns workers) after.

    Raises:
        RuntimeError: the server exited, or did not answer within ``startup_s``.
    """
    port = free_port()
    command = [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--backend-store-uri", f"sqlite:///{folder / 'server.db'}"]
    command += ["--artifacts-destination", str(folder / "server-artifacts"), "--workers", "1"]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer /health within {startup_s} s")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
