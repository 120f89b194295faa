"""A shared MLflow tracking server on PostgreSQL, for local development and for the tests.

``python -m evalharness.tracking.server`` starts PostgreSQL on 127.0.0.1 with its data under
``--folder`` (:mod:`evalharness.tracking.postgres`), then ``mlflow server`` on that database with
``--artifacts-destination <folder>/artifacts --serve-artifacts`` (clients need no shared file
system), and prints the URI to pass as ``logger.tracking_uri=``. Ctrl-C (or SIGTERM) stops
MLflow, then PostgreSQL. With ``--auth`` the server runs MLflow's basic-auth app
(:mod:`evalharness.tracking.auth`): users in a second database ``<database>_auth``, the admin's
credentials in ``<folder>/admin.credentials``, users added with the ``add-user`` command.
Without ``--auth`` only a loopback ``--host`` is served; any other is refused (exit 2).
:func:`start_mlflow` also serves the tests' ``mlflow server`` on sqlite.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.engine import make_url

from evalharness.tracking import auth
from evalharness.tracking.postgres import free_port, postgres_server
from evalharness.tracking.redaction import redacted

DEFAULT_FOLDER = Path("outputs/tracking-server")
# What the server needs beyond the core dependencies, both from the ``postgres`` extra.
POSTGRES_DRIVER = "psycopg"
AUTH_APP_MODULE = "flask_wtf"


def start_mlflow(
    backend_store_uri: str,
    artifacts: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    workers: int | None = None,
    log_file: Path | None = None,
    startup_s: float = 120.0,
    auth_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """Starts ``mlflow server`` (artifacts proxied to ``artifacts``) and waits for ``/health``.

    Args:
        backend_store_uri: the runs' database (SQLAlchemy URI).
        artifacts: the folder the server stores uploaded artifacts in.
        host: the interface to listen on.
        port: the port; None picks a free one.
        workers: server workers; None is MLflow's default.
        log_file: where the server's output goes (appended); None: a temporary file.
        startup_s: how long to wait for ``/health`` (a first start migrates the schema).
        auth_env: None serves without authentication; else MLflow's basic-auth app runs with
            this environment (:func:`evalharness.tracking.auth.server_env`).

    Returns:
        The server process (its own process group: :func:`stop_process_group` stops it) and URL.

    Raises:
        RuntimeError: the server exited (its output's tail included) or did not answer in time.
    """
    port = port or free_port(host)
    command = [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port)]
    command += ["--artifacts-destination", str(Path(artifacts).resolve()), "--serve-artifacts"]
    if workers is not None:
        command += ["--workers", str(workers)]
    if auth_env is not None:
        command += ["--app-name", auth.AUTH_APP]
    # The store URI (and the admin's password) travel in the environment (the options'
    # documented variables), so a password stays out of the process list.
    env = {**os.environ, **(auth_env or {}), "MLFLOW_BACKEND_STORE_URI": backend_store_uri}
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.tracking.server",
        description=__doc__.split("\n\n")[0]
        + " The add-user command adds a user to a server started with --auth.",
    )
    parser.add_argument(
        "--folder",
        type=Path,
        default=DEFAULT_FOLDER,
        help="PostgreSQL data, its password, artifacts and logs (default: %(default)s); reused",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="MLflow's interface (PostgreSQL's is 127.0.0.1); beyond loopback only with --auth",
    )
    parser.add_argument("--port", type=int, default=None, help="MLflow's port (default: free)")
    parser.add_argument("--workers", type=int, default=None, help="MLflow server workers")
    parser.add_argument("--database", default="mlflow", help="database name (default: mlflow)")
    parser.add_argument(
        "--pg-user", default=None, help="PostgreSQL's user when started by root (default: postgres)"
    )
    parser.add_argument(
        "--auth", action="store_true", help="ask every request for a user name and password"
    )
    parser.add_argument(
        "--admin-credentials",
        type=Path,
        default=None,
        help=f"with --auth: the admin's USERNAME:PASSWORD file, mode 0600 (default: "
        f"<folder>/{auth.ADMIN_FILE}, created with a random password when missing)",
    )
    parser.add_argument(
        "--default-permission",
        choices=auth.PERMISSIONS,
        default=auth.DEFAULT_PERMISSION,
        help="with --auth: what every user may do on others' experiments (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", metavar="add-user")
    add = commands.add_parser(
        "add-user",
        help="add a user to a server started with --auth (password from standard input)",
        description="Adds a user to a tracking server started with --auth, signed in as its "
        "admin. The new password is read from standard input (a prompt on a terminal).",
    )
    add.add_argument("username")
    add.add_argument("--tracking-uri", required=True, help="the server, http://HOST:PORT")
    add.add_argument(
        "--admin-credentials",
        dest="admin_file",
        type=Path,
        default=DEFAULT_FOLDER / auth.ADMIN_FILE,
        help="the admin's USERNAME:PASSWORD file (default: %(default)s)",
    )
    return parser


def _serve(args: argparse.Namespace) -> int:
    """Runs both servers until Ctrl-C (0) or until MLflow exits by itself (1)."""
    auth.check_exposure(args.host, args.auth)
    folder = args.folder.resolve()
    admin_file = (args.admin_credentials or folder / auth.ADMIN_FILE).resolve()
    admin = auth.ensure_admin_credentials(admin_file)[0] if args.auth else None
    # Users and permissions live apart from the runs, in a second database of the same server.
    users = (f"{args.database}_auth",) if admin is not None else ()
    with postgres_server(
        folder, database=args.database, pg_user=args.pg_user, more_databases=users
    ) as db_uri:
        auth_env = None
        if admin is not None:
            # The users' database on the same server, user and password.
            users_db = make_url(db_uri).set(database=users[0]).render_as_string(hide_password=False)
            config = auth.write_auth_config(
                folder / auth.AUTH_CONFIG_FILE, users_db, admin.username, args.default_permission
            )
            auth_env = auth.server_env(config, admin)
        proc, url = start_mlflow(
            db_uri,
            folder / "artifacts",
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_file=folder / "mlflow.log",
            auth_env=auth_env,
        )
        try:
            if admin is not None:
                auth.check_admin(url, admin, admin_file)
            print(_banner(url, db_uri, folder, args, admin_file if admin else None), flush=True)
            code = proc.wait()
            print(f"error: mlflow server exited ({code}); stopping PostgreSQL", file=sys.stderr)
            return 1
        finally:
            stop_process_group(proc)


def _banner(
    url: str, db_uri: str, folder: Path, args: argparse.Namespace, admin_file: Path | None
) -> str:
    """What the server prints once it answers: where everything is and how to use it (no
    password: the database's is redacted, the admin's stays in its file)."""
    lines = [
        f"MLflow tracking server: {url}",
        f"  runs: {redacted(db_uri)} (password in {folder / 'postgres.password'}), "
        f"data in {folder / 'postgres'}",
        f"  artifacts: {folder / 'artifacts'} (uploaded and served through the server)",
        f"  logs: {folder / 'mlflow.log'}, {folder / 'postgres' / 'postgres.log'}",
        f"  use: python -m evalharness logger.tracking_uri={url}",
    ]
    if admin_file is not None:
        lines[-1] += (
            f" with {auth.USERNAME_VAR} and {auth.PASSWORD_VAR} set to a user's credentials"
        )
        lines += [
            f"  auth: MLflow basic-auth, users in database {args.database}_auth; every user "
            f"may {args.default_permission} others' experiments",
            f"  admin credentials: {admin_file} (mode 0600)",
            f"  add a user: python -m evalharness.tracking.server add-user NAME "
            f"--tracking-uri {url} --admin-credentials {admin_file} (password from stdin)",
        ]
    return "\n".join([*lines, "Ctrl-C stops both."])


def _add_user(args: argparse.Namespace) -> int:
    """The add-user command: the new password from standard input, never the command line."""
    auth.check_username(args.username)  # before any file is read or password asked for
    source = args.admin_file.resolve()
    admin = auth.read_credentials(source)
    user = auth.Credentials(args.username, _read_new_password(args.username))
    auth.add_user(args.tracking_uri, admin, source, user)
    print(f"added user {args.username!r} on {redacted(args.tracking_uri)}")
    return 0


def _read_new_password(username: str) -> str:
    """The new user's password: typed twice on a terminal, else standard input's first line.

    Raises:
        ValueError: the two typed passwords differ, or standard input is empty.
    """
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {username}: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ; nothing was changed")
        return first
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ValueError(
            f"no password for {username!r} on standard input: pipe it in "
            f"(e.g. from a file: < {username}.password) or run the command on a terminal"
        )
    return password


def missing_extra(args: argparse.Namespace) -> str | None:
    """What the command needs and is not installed, with the extra that brings it; None when
    all is there. Serving needs the PostgreSQL driver, and with ``--auth`` the auth app's
    Flask-WTF; ``add-user`` talks to the auth app through MLflow's client, which imports it."""
    serving = args.command != "add-user"
    missing = []
    if serving and importlib.util.find_spec(POSTGRES_DRIVER) is None:
        missing.append("psycopg (SQLAlchemy's PostgreSQL driver)")
    if (args.auth or not serving) and importlib.util.find_spec(AUTH_APP_MODULE) is None:
        missing.append("Flask-WTF (MLflow's basic-auth app)")
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} not installed: pip install -e '.[postgres]' brings "
        f"{'it' if len(missing) == 1 else 'both'}; nothing was started"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code: 0 stopped by Ctrl-C or SIGTERM (or a user
    added), 1 MLflow died, 2 could not start or refused (the message says why)."""
    args = _parser().parse_args(argv)
    missing = missing_extra(args)
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    try:
        if args.command == "add-user":
            return _add_user(args)
    except (OSError, ValueError) as err:
        print(f"error: add-user: {err}", file=sys.stderr)
        return 2
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
