"""What kind of store a tracking URI names, and opening it safely when runs create it at once.

MLflow creates a database's tables (and migrates its schema) the first time a client opens the
store, with no lock of its own: two runs starting together on a new sqlite file both create them,
and one fails (``table experiments already exists``, or alembic's "expected to match one row").
:func:`open_client` opens the store under an exclusive ``flock`` (:func:`creation_lock`) on
``<database>.lock`` beside a sqlite file, or, for a database server, on a file in the temporary
folder named by a hash of the URI (one host's processes). Other hosts, or tools that take no
lock, may still race a server's schema creation: an error that looks like it is retried later.
The lock file stays (removing it could let two processes lock two different files). Once per
process suffices: MLflow caches the store per URI.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from evalharness.refusal import PreflightRefusal
from evalharness.tracking.redaction import redacted
from models.uri_redaction import quiet_run_links

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

LOCK_SUFFIX = ".lock"
# Creating a new store's schema takes seconds; a process holding the lock far longer is stuck
# (a killed holder releases it: flock locks die with their process).
LOCK_TIMEOUT_S = 300.0
LOCK_POLL_S = 0.2
# Errors of two processes creating the same schema (sqlite, PostgreSQL, MySQL, alembic's wording).
RACE_MARKERS = (
    "already exists",
    "duplicate",
    "unique constraint",
    "uniqueviolation",
    "integrityerror",
    "expected to match one row",
)
RACE_RETRIES = 3
RACE_WAIT_S = 2.0
SERVER_SCHEMES = ("http", "https", "databricks", "databricks-uc", "uc")


class TrackingUnavailable(PreflightRefusal):
    """``logger.tracking_uri`` names a store that cannot be reached or opened; nothing ran."""


def store_kind(uri: str) -> str:
    """``sqlite``, ``postgresql``, ``database`` (MySQL, SQL Server), ``server`` (an MLflow server
    over HTTP) or ``other`` (a file store, a plugin): what kind of store ``uri`` names."""
    scheme = urlsplit(uri).scheme.lower()
    engine = scheme.split("+")[0]
    if engine == "sqlite":
        return "sqlite"
    if engine in ("postgresql", "postgres"):
        return "postgresql"
    if engine in ("mysql", "mssql"):
        return "database"
    if scheme in SERVER_SCHEMES:
        return "server"
    return "other"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite URI (relative to the working folder for ``sqlite:///x.db``,
    absolute for ``sqlite:////x.db``); None for another kind of store or an in-memory database."""
    if store_kind(uri) != "sqlite":
        return None
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError

    try:
        database = sqlalchemy.engine.make_url(uri).database
    except (ArgumentError, ValueError):
        return None  # malformed: the probe's connection names it
    if database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def default_store_uri(output_root: str | Path) -> str:
    """The default store: sqlite ``mlflow.db`` under ``output_root``; nothing is created."""
    return f"sqlite:///{Path(output_root).resolve() / 'mlflow.db'}"


def lock_path(uri: str) -> Path | None:
    """The file :func:`creation_lock` locks for ``uri``; None where the client creates no schema
    (an MLflow server creates its own; a file store needs none)."""
    db = sqlite_file(uri)
    if db is not None:
        return db.with_name(db.name + LOCK_SUFFIX)
    if store_kind(uri) in ("postgresql", "database"):
        # The store's name without its password: a file name anyone can list must not carry a
        # hash of the password (a weak one could be guessed from it offline).
        digest = hashlib.sha256(redacted(uri).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"evalharness-tracking-{digest}{LOCK_SUFFIX}"
    return None


@contextlib.contextmanager
def creation_lock(uri: str, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Holds the inter-process lock under which ``uri``'s store is created or migrated.

    Raises:
        TrackingUnavailable: the lock file cannot be created (a sqlite folder that is not
            writable), or another process held the lock for ``timeout_s``.
    """
    path = lock_path(uri)
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise TrackingUnavailable(
            f"cannot create the tracking store's lock file {path}: {err.strerror or err}. "
            f"Fix: {writable_path_fix(path.parent)}. Nothing was computed."
        ) from None
    try:
        _acquire(fd, path, timeout_s)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path: Path, timeout_s: float) -> None:
    """Takes the exclusive lock, polling so a stuck holder ends in a message, not a hang."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() > deadline:
            raise TrackingUnavailable(
                f"another process has held {path} for over {timeout_s:.0f} s while creating the "
                f"tracking store. Fix: wait for it to finish, or find it with `fuser {path}`. "
                "Nothing was computed."
            )
        time.sleep(LOCK_POLL_S)


def writable_path_fix(folder: Path) -> str:
    """The fix for a sqlite store whose folder cannot be written."""
    return (
        f"make {folder} writable by this user, or point the store at a writable path, e.g. "
        "logger.tracking_uri=sqlite:////writable/path/mlflow.db (four slashes before an absolute "
        "path), or run with logger=none"
    )


def open_client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` of ``uri`` whose store exists (created under :func:`creation_lock`).

    Raises:
        TrackingUnavailable: see :func:`creation_lock`.
        Exception: whatever MLflow raises for a store it cannot open (the probe turns it into a
            refusal).
    """
    from mlflow.tracking import MlflowClient

    quiet_run_links()  # MLflow's "View run ... at: <URI>" would print a password in the URI
    with creation_lock(uri):
        database = sqlite_file(uri)
        if database is not None and not database.exists():
            _create_sqlite_store(database)
        for attempt in range(1, RACE_RETRIES):
            try:
                return MlflowClient(tracking_uri=uri)
            except Exception as err:
                if not looks_like_creation_race(err):
                    raise
                time.sleep(RACE_WAIT_S * attempt)  # another host's process is creating it
        return MlflowClient(tracking_uri=uri)


def _create_sqlite_store(database: Path) -> None:
    """Creates a new sqlite store whole or not at all: MLflow creates and migrates its tables in
    a file beside ``database`` (``.<name>.creating-*``), renamed into place when complete, so a
    process killed meanwhile leaves no half-created store; a leftover of one is removed (the
    caller holds :func:`creation_lock`, so no other process is creating it)."""
    from mlflow.tracking import MlflowClient

    for leftover in database.parent.glob(f".{database.name}.creating-*"):
        leftover.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{database.name}.creating-", dir=database.parent)
    os.close(fd)
    creating = Path(name)
    creating.unlink()  # sqlite creates the file itself
    try:
        # A search makes MLflow build the store: its tables, migrations and default experiment.
        MlflowClient(tracking_uri=f"sqlite:///{creating.resolve()}").search_experiments(
            max_results=1
        )
        os.replace(creating, database)
    finally:
        creating.unlink(missing_ok=True)


def holds_no_runs(database: Path) -> bool:
    """Whether the sqlite file ``database`` opens as a database with no MLflow run in it (no
    ``runs`` table, or an empty one): nothing is lost by deleting it."""
    import sqlite3

    try:
        with contextlib.closing(
            sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if "runs" not in tables:
                return True
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
    except sqlite3.Error:
        return False


def looks_like_creation_race(err: BaseException) -> bool:
    """Whether ``err`` reads like two processes creating the same schema."""
    text = f"{type(err).__name__} {err} {getattr(err, 'orig', '')!r}".lower()
    return any(marker in text for marker in RACE_MARKERS)


@contextlib.contextmanager
def bounded_http(retries: int, timeout_s: float) -> Iterator[None]:
    """MLflow's HTTP retries and timeout bounded for the body (process-wide: for a command's own
    requests, with no other thread talking to the server)."""
    bounds = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(timeout_s)),
    }
    with environment(bounds):
        yield


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The environment variables ``values`` set for the body, each restored (or removed) after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
