"""A shared MLflow tracking server on PostgreSQL, for local development and for the tests.

``python -m evalharness.tracking.server`` starts PostgreSQL on 127.0.0.1 with its data under
``--folder`` (``evalharness.tracking.postgres``: Debian's ``postgresql`` package, run as the
``postgres`` user when started by root), then ``mlflow server`` with that database as its backend
store and ``--artifacts-destination <folder>/artifacts --serve-artifacts``, and prints the
tracking URI to pass as ``logger.tracking_uri=``. Clients need no shared file system: artifacts
are uploaded to and downloaded from the server. Ctrl-C (or SIGTERM) stops MLflow, then PostgreSQL.

In Python, :func:`tracking_server` does the same as a context manager that yields the tracking
URI; :func:`postgres_server` and :func:`mlflow_server` are its two halves (the tests start
``mlflow server`` on sqlite with the second, and drive this command itself for PostgreSQL).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from evalharness.tracking.postgres import free_port, postgres_server, redacted


def start_mlflow(
    backend_store_uri: str,
    artifacts: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    workers: int | None = None,
    log_file: Path | None = None,
    startup_s: float = 120.0,
) -> tuple[subprocess.Popen, str]:
    """Starts ``mlflow server`` (artifacts proxied to ``artifacts``) and waits for ``/health``.

    Args:
        backend_store_uri: the runs' database (SQLAlchemy URI).
        artifacts: the folder the server stores uploaded artifacts in.
        host: the interface to listen on.
        port: the port; None picks a free one.
        workers: server workers; None is MLflow's default.
        log_file: where the server's output goes (appended); None keeps it in a temporary file.
        startup_s: how long to wait for ``/health`` (the first start on an empty database runs
            MLflow's schema migrations).

    Returns:
        The server process (its own process group: stop it with :func:`stop_process_group`) and
        its URL.

    Raises:
        RuntimeError: the server exited (its output's tail included) or did not answer in time.
    """
    port = port or free_port(host)
    command = [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port)]
    command += ["--artifacts-destination", str(Path(artifacts).resolve()), "--serve-artifacts"]
    if workers is not None:
        command += ["--workers", str(workers)]
    # The store URI travels in the environment (the option's documented variable), so a password
    # in it stays out of the process list.
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": backend_store_uri}
    # MLflow's job runner (GenAI scorers, trace archival) starts about eight more processes that
    # tracking runs never use; off unless the environment asks for it.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    with open(log_file, "ab+") if log_file else tempfile.TemporaryFile() as log:
        start = log.seek(0, os.SEEK_END)
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        url = f"http://{host}:{port}"
        try:
            _wait_for_health(proc, url, startup_s)
        except BaseException as err:
            stop_process_group(proc)
            log.seek(start)
            tail = log.read().decode(errors="replace")[-3000:]
            if isinstance(err, RuntimeError):
                raise RuntimeError(f"{err}; its output:\n{tail}") from None
            raise
    return proc, url


def _wait_for_health(proc: subprocess.Popen, url: str, startup_s: float) -> None:
    deadline = time.monotonic() + startup_s
    while True:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"mlflow server at {url} did not answer /health in {startup_s:.0f} s"
            )
        time.sleep(0.25)


def stop_process_group(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM to the process's group (``mlflow server`` spawns workers), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def mlflow_server(backend_store_uri: str, artifacts: Path, **options) -> Iterator[str]:
    """``mlflow server`` on ``backend_store_uri`` with artifacts served from ``artifacts``; yields
    its URL and stops it after. ``options`` go to :func:`start_mlflow`."""
    proc, url = start_mlflow(backend_store_uri, artifacts, **options)
    try:
        yield url
    finally:
        stop_process_group(proc)


@contextlib.contextmanager
def tracking_server(
    folder: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    workers: int | None = None,
    database: str = "mlflow",
    pg_user: str | None = None,
) -> Iterator[str]:
    """PostgreSQL and ``mlflow server`` on it (artifacts under ``folder/artifacts``); yields the
    tracking URI; stops MLflow, then PostgreSQL. See :func:`postgres_server` for the rest."""
    folder = Path(folder).resolve()
    with (
        postgres_server(folder, database=database, pg_user=pg_user) as db_uri,
        mlflow_server(db_uri, folder / "artifacts", host=host, port=port, workers=workers) as url,
    ):
        yield url


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.tracking.server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--folder",
        type=Path,
        default=Path("outputs/tracking-server"),
        help="PostgreSQL data, its password, artifacts and logs (default: %(default)s); reused",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="MLflow's interface (PostgreSQL's is 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=None, help="MLflow's port (default: free)")
    parser.add_argument("--workers", type=int, default=None, help="MLflow server workers")
    parser.add_argument("--database", default="mlflow", help="database name (default: mlflow)")
    parser.add_argument(
        "--pg-user", default=None, help="PostgreSQL's user when started by root (default: postgres)"
    )
    return parser


def _serve(args: argparse.Namespace) -> int:
    """Runs both servers until Ctrl-C (0) or until MLflow exits by itself (1)."""
    folder = args.folder.resolve()
    with postgres_server(folder, database=args.database, pg_user=args.pg_user) as db_uri:
        proc, url = start_mlflow(
            db_uri,
            folder / "artifacts",
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_file=folder / "mlflow.log",
        )
        try:
            print(
                f"MLflow tracking server: {url}\n"
                f"  runs: {redacted(db_uri)} (password in {folder / 'postgres.password'}), "
                f"data in {folder / 'postgres'}\n"
                f"  artifacts: {folder / 'artifacts'} (uploaded and served through the server)\n"
                f"  logs: {folder / 'mlflow.log'}, {folder / 'postgres' / 'postgres.log'}\n"
                f"  use: python -m evalharness logger.tracking_uri={url}\n"
                "Ctrl-C stops both.",
                flush=True,
            )
            code = proc.wait()
            print(f"error: mlflow server exited ({code}); stopping PostgreSQL", file=sys.stderr)
            return 1
        finally:
            stop_process_group(proc)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code: 0 stopped by Ctrl-C or SIGTERM, 1 MLflow died,
    2 could not start (the message says why)."""
    args = _parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so both servers are stopped, MLflow first; SIGINT is set too,
    # as a shell starting us in the background leaves it ignored.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _serve(args)
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0
    except (OSError, LookupError, RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
