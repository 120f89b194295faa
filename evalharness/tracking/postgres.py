"""A local PostgreSQL server for MLflow's backend store, run with PostgreSQL's own tools.

:func:`postgres_server` initialises a cluster under ``folder/postgres`` (``initdb``), starts it
(``pg_ctl``), creates the database (``psql``, ``createdb``), yields its URI and stops it. The tools
come from ``PATH`` or Debian's ``/usr/lib/postgresql/<version>/bin``. PostgreSQL refuses to run as
root: started by root, its tools run as ``postgres`` (else ``nobody``, or ``pg_user``) through
``subprocess``'s ``user=``/``group=``, and that user must reach the folder. The server listens on
127.0.0.1 only, without a Unix socket, and asks for a random password kept in
``<folder>/postgres.password`` (mode 0600), so other local users cannot open the database. The
data persists: started again on the same folder, it reuses the cluster, database and password.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

PG_SUPERUSER = "evalharness"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def postgres_bin_dir() -> Path:
    """The folder of PostgreSQL's server tools: ``initdb``'s on ``PATH``, else the newest of
    Debian's ``/usr/lib/postgresql/<version>/bin`` (off ``PATH``).

    Raises:
        FileNotFoundError: PostgreSQL is not installed; the message says how to install it.
    """
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if not found:
        raise FileNotFoundError(
            "PostgreSQL's initdb is not on PATH nor under /usr/lib/postgresql: install PostgreSQL "
            "(Debian: apt-get install postgresql)"
        )
    return max(found, key=lambda p: tuple(int(part) for part in re.findall(r"\d+", p.parent.name)))


def _service_user(requested: str | None) -> pwd.struct_passwd | None:
    """Whom PostgreSQL runs as: None (this user) unless we are root, who may not run it."""
    if os.geteuid() != 0:
        if requested and requested != pwd.getpwuid(os.geteuid()).pw_name:
            raise PermissionError(
                f"--pg-user {requested}: only root can run PostgreSQL as another user"
            )
        return None
    for name in [requested] if requested else ["postgres", "nobody"]:
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        if user.pw_uid == 0:
            raise PermissionError("PostgreSQL refuses to run as root: name a non-root --pg-user")
        return user
    raise LookupError(
        f"no user {requested or 'postgres or nobody'} to run PostgreSQL as: create one, or name one with --pg-user"
    )


class _Postgres:
    """PostgreSQL's tools for one data folder, run as the service user when we are root."""

    def __init__(self, folder: Path, user: str | None) -> None:
        self.bin = postgres_bin_dir()
        self.user = _service_user(user)
        self.data = folder / "postgres"
        self.log = self.data / "postgres.log"  # pg_ctl opens it as the service user
        self.password_file = folder / "postgres.password"

    def run(
        self,
        tool: str,
        *args: str,
        as_service: bool = True,
        password: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """Runs ``tool`` (as the service user unless ``as_service`` is False); raises with its
        stderr and the server log's tail when it fails and ``check`` is True."""
        env = {**os.environ, "LC_ALL": "C"}  # English messages, no dependence on installed locales
        if password is not None:
            env["PGPASSWORD"] = password  # kept out of the process list, unlike a URI argument
        user = self.user if as_service else None
        done = subprocess.run(
            [str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,  # drop root's supplementary groups too
            start_new_session=True,  # the caller's Ctrl-C reaches us; we stop the server in order
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}{self._log_tail()}"
            )
        return done

    def _log_tail(self) -> str:
        try:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-15:]
        except OSError:
            return ""
        return "\n" + f"last lines of {self.log}:\n" + "\n".join(tail) if tail else ""

    def ensure_cluster(self) -> str:
        """Initialises the data folder unless it already holds a cluster; returns the password."""
        if (self.data / "PG_VERSION").is_file():
            try:
                return self.password_file.read_text().strip()
            except OSError as err:
                raise FileNotFoundError(
                    f"{self.data} holds a cluster but its password file is unreadable ({err}): use a fresh --folder"
                ) from err
        self.data.mkdir(parents=True, exist_ok=True)
        self.data.chmod(0o700)  # initdb insists
        password = secrets.token_urlsafe(24)
        fd, pwfile = tempfile.mkstemp(prefix="evalharness-pg-")  # initdb reads it as the user
        try:
            os.write(fd, password.encode())
            os.close(fd)
            if self.user is not None:
                os.chown(self.data, self.user.pw_uid, self.user.pw_gid)
                os.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
                self._check_reachable()
            self.run(
                "initdb",
                *("-D", str(self.data), "-U", PG_SUPERUSER, f"--pwfile={pwfile}"),
                *("--auth=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-instructions"),
            )
        finally:
            os.unlink(pwfile)
        self.password_file.write_text(password + "\n")
        self.password_file.chmod(0o600)
        return password

    def _check_reachable(self) -> None:
        """Fails clearly when the service user cannot enter the data folder (a 0700 parent)."""
        assert self.user is not None
        probe = subprocess.run(
            ["test", "-w", str(self.data), "-a", "-x", str(self.data)],
            user=self.user.pw_uid,
            group=self.user.pw_gid,
            extra_groups=[],
            check=False,
        )
        if probe.returncode != 0:
            blocked = next(
                (p for p in reversed(self.data.parents) if not p.stat().st_mode & 0o001), self.data
            )
            raise PermissionError(
                f"PostgreSQL runs as {self.user.pw_name!r} (it refuses root), who cannot reach {self.data} "
                f"({blocked} is closed to other users): choose a --folder that user can reach, e.g. under "
                "/var/tmp or /srv, or run as a non-root user"
            )

    def refuse_if_running(self) -> None:
        """Fails when a server (started elsewhere) already runs on this data folder, which this
        helper must neither start twice nor stop on its way out."""
        status = self.run("pg_ctl", "status", "-D", str(self.data), check=False)
        if status.returncode == 0:
            raise RuntimeError(
                f"a PostgreSQL server already runs on {self.data} ({status.stdout.strip()}): stop it (pg_ctl stop -D {self.data}) or use another --folder"
            )

    def start(self, port: int) -> None:
        """Starts the server on 127.0.0.1:``port`` (TCP only) and waits until it accepts."""
        options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories=''"
        where = ("-D", str(self.data), "-l", str(self.log))
        self.run("pg_ctl", "start", *where, "-w", "-t", "60", "-o", options)

    def stop(self) -> None:
        """Fast shutdown (open sessions are rolled back), waiting until the server is down."""
        if (self.data / "postmaster.pid").exists():
            self.run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "60")

    def ensure_database(self, name: str, port: int, password: str) -> None:
        """Creates database ``name`` unless it exists."""
        where = ("-h", "127.0.0.1", "-p", str(port), "-U", PG_SUPERUSER)
        query = f"SELECT 1 FROM pg_database WHERE datname = '{name}'"  # name is checked: \w+
        found = self.run(
            "psql", *where, "-d", "postgres", "-tAc", query, as_service=False, password=password
        )
        if not found.stdout.strip():
            self.run("createdb", *where, name, as_service=False, password=password)


@contextlib.contextmanager
def postgres_server(
    folder: Path,
    *,
    database: str = "mlflow",
    pg_user: str | None = None,
    more_databases: Sequence[str] = (),
) -> Iterator[str]:
    """A PostgreSQL server with its data under ``folder/postgres``, on 127.0.0.1.

    Args:
        folder: where the cluster (``postgres/``) and its password file live; reused when they
            exist.
        database: the database to create (letters, digits, underscores).
        more_databases: other databases to create beside it (on the same URI but its name).
        pg_user: the user PostgreSQL runs as when we are root (default ``postgres``, else
            ``nobody``).

    Yields:
        The database's SQLAlchemy URI (``postgresql+psycopg://...``, password included: show it
        only through :func:`~evalharness.tracking.redaction.redacted`).

    Raises:
        FileNotFoundError: PostgreSQL is not installed.
        PermissionError: the service user cannot reach ``folder``.
        RuntimeError: a PostgreSQL tool failed (its message and the server log's tail included).
        ValueError: ``database`` is not a plain name.
    """
    for name in (database, *more_databases):
        if not re.fullmatch(r"[A-Za-z_]\w*", name, flags=re.ASCII):
            raise ValueError(f"database name {name!r}: use letters, digits and underscores")
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    pg = _Postgres(folder, pg_user)
    password = pg.ensure_cluster()
    pg.refuse_if_running()
    port = free_port()
    try:
        # Inside the try: a Ctrl-C while pg_ctl waits may leave a started server to stop. Any
        # server on this folder now is ours (refuse_if_running).
        pg.start(port)
        for name in (database, *more_databases):
            pg.ensure_database(name, port, password)
        yield f"postgresql+psycopg://{PG_SUPERUSER}:{quote(password, safe='')}@127.0.0.1:{port}/{database}"
    finally:
        pg.stop()
