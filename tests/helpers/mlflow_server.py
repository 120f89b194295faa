"""Real tracking servers on 127.0.0.1 for integration tests, and harness runs that log to them.

``mlflow_server``: ``mlflow server`` on a sqlite store (``evalharness.tracking.server``'s
``start_mlflow``). ``auth_mlflow_server``: the same behind MLflow's basic-auth app, its admin's
password planted at random, for a tracking URI that carries it (``http://admin:PASSWORD@...``). ``team_server``: PostgreSQL behind ``mlflow server``, started and stopped (Ctrl-C) through
``python -m evalharness.tracking.server`` itself. Both serve artifacts through the server. ``start_harness`` runs ``python -m evalharness``
as its own process, the way team members' jobs reach a shared server.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalharness.tracking import auth, server
from evalharness.tracking.postgres import postgres_bin_dir
from tests.helpers.harness_config import SMALL


@contextmanager
def mlflow_server(folder: Path, *, startup_s: float = 90.0) -> Iterator[str]:
    """Starts ``mlflow server`` with its sqlite database and artifacts under ``folder``; yields its
    URL once ``/health`` answers, and stops its whole process group (it spawns workers) after.

    Raises:
        RuntimeError: the server exited, or did not answer within ``startup_s``.
    """
    proc, url = server.start_mlflow(
        f"sqlite:///{folder / 'server.db'}",
        folder / "server-artifacts",
        workers=1,
        startup_s=startup_s,
    )
    try:
        yield url
    finally:
        server.stop_process_group(proc)


@contextmanager
def auth_mlflow_server(folder: Path, *, startup_s: float = 120.0) -> Iterator[str]:
    """:func:`mlflow_server` with MLflow's basic-auth app (users in a second sqlite database,
    both under ``folder``), on 127.0.0.1 only; yields the tracking URI with the admin's user name
    and a random password in it (``http://admin:PASSWORD@127.0.0.1:PORT``), which the server
    accepts. The password reaches the server only in its environment.

    Raises:
        RuntimeError: the server exited, or did not answer within ``startup_s``.
    """
    admin = auth.Credentials(auth.DEFAULT_ADMIN, secrets.token_urlsafe(24))
    users = f"sqlite:///{folder / 'users.db'}"
    config = auth.write_auth_config(folder / auth.AUTH_CONFIG_FILE, users, admin.username)
    proc, url = server.start_mlflow(
        f"sqlite:///{folder / 'server.db'}",
        folder / "server-artifacts",
        workers=1,
        startup_s=startup_s,
        auth_env=auth.server_env(config, admin),
    )
    try:
        yield url.replace("://", f"://{admin.username}:{admin.password}@", 1)
    finally:
        server.stop_process_group(proc)


def postgres_missing() -> str | None:
    """Why a PostgreSQL-backed server cannot run here (a skip reason), or None."""
    try:
        postgres_bin_dir()
    except FileNotFoundError as err:
        return str(err)
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg (PostgreSQL's Python driver) is not installed: pip install -e '.[test]'"
    return None


@dataclass(frozen=True)
class TeamServer:
    """A PostgreSQL-backed MLflow server started by ``python -m evalharness.tracking.server``.

    Attributes:
        uri: the tracking URI clients use (``http://127.0.0.1:PORT``), as the command printed it.
        database_uri: the backend store's SQLAlchemy URI, from the printed (redacted) one and the
            password file.
        artifacts: the server's artifact store (a folder only the server writes).
        folder: the command's ``--folder`` (its logs, the admin credentials with ``--auth``).
        banner: every line the command printed on starting.
    """

    uri: str
    database_uri: str
    artifacts: Path
    folder: Path
    banner: str


@contextmanager
def team_server(*options: str) -> Iterator[TeamServer]:
    """``python -m evalharness.tracking.server`` in a fresh folder (with ``options``, e.g.
    ``--auth``); yields what it printed, then stops it with Ctrl-C (SIGINT) and checks it
    stopped both servers cleanly.

    The folder is made under the system temporary folder and opened to other users (0755):
    started by root, PostgreSQL runs as the ``postgres`` user, who cannot enter pytest's
    ``/tmp/pytest-of-root`` (0700).

    Raises:
        RuntimeError: the command did not start (its output included).
        AssertionError: Ctrl-C did not stop it cleanly (exit 0, PostgreSQL shut down).
    """
    folder = Path(tempfile.mkdtemp(prefix="evalharness-team-server-"))
    folder.chmod(0o755)
    command = [sys.executable, "-m", "evalharness.tracking.server", "--folder", str(folder)]
    proc = subprocess.Popen(
        [*command, "--workers", "1", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = []  # up to its last line; bounded by the command's own start timeouts
        while not banner or banner[-1] and not banner[-1].startswith("Ctrl-C"):
            banner.append(proc.stdout.readline())
        printed = dict(line.strip().split(": ", 1) for line in banner if ": " in line)
        if "MLflow tracking server" not in printed:
            raise RuntimeError(
                f"tracking_server did not start: {''.join(banner)}{proc.stderr.read()}"
            )
        password = (folder / "postgres.password").read_text().strip()
        database_uri = printed["runs"].split(" ")[0].replace(":***@", f":{password}@")
        uri = printed["MLflow tracking server"]
        yield TeamServer(uri, database_uri, folder / "artifacts", folder, "".join(banner))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out, f"Ctrl-C: exit {proc.returncode}, {err}"
        assert not (folder / "postgres" / "postmaster.pid").exists(), "PostgreSQL still runs"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # it stops both servers; killing it would orphan them
            proc.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def harness_command(tmp_path: Path, *overrides: str, cache_dir: Path | None = None) -> list[str]:
    """``python -m evalharness`` at the tests' small sizes, outputs under ``tmp_path``."""
    return [
        sys.executable,
        "-m",
        "evalharness",
        *SMALL,
        f"output_root={tmp_path / 'outputs'}",
        f"cache_dir={cache_dir or tmp_path / 'cache'}",
        "progress=off",
        *overrides,
    ]


def start_harness(
    tmp_path: Path, *overrides: str, cache_dir: Path | None = None
) -> subprocess.Popen:
    """Starts :func:`harness_command` in ``tmp_path`` (Hydra writes nothing elsewhere); its
    output goes to ``tmp_path/harness.log``. The environment (CPU JAX, the session's compilation
    cache) is inherited."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with open(tmp_path / "harness.log", "wb") as log:
        return subprocess.Popen(
            harness_command(tmp_path, *overrides, cache_dir=cache_dir),
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
