"""Fail fast on a tracking store that cannot be used, before any model is built or compiled.

MLflow's HTTP client retries a failed request for minutes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES=7``,
``MLFLOW_HTTP_REQUEST_TIMEOUT=120`` s) and its SQL store retries opening a database for about
100 s: patience that suits a run with results to save, not the answer "this URI is wrong". So
the run first asks the store once, bounded: a server with one retry and a :data:`PROBE_TIMEOUT_S`
timeout (set for the probe only: the run's own requests keep MLflow's defaults), a database with
one SQLAlchemy connection and a connect timeout. A refusal (exit code 2, no traceback) names the
URI, its password hidden, and the fix for that kind of store. The probe is the first to open the
store, so a new one is created here (under :func:`~evalharness.tracking.store.open_client`'s lock).
"""

from __future__ import annotations

import os
from pathlib import Path

from evalharness.tracking.auth import login_refusal, login_refused
from evalharness.tracking.redaction import redacted
from evalharness.tracking.store import (
    TrackingUnavailable,
    bounded_http,
    default_store_uri,
    holds_no_runs,
    open_client,
    sqlite_file,
    store_kind,
    writable_path_fix,
)

PROBE_TIMEOUT_S = 5
PROBE_RETRIES = 1
# The fix for a store that cannot be used, by its kind (sqlite's names its file: fix_for).
FIXES = {
    "server": (
        "check the host, port and credentials in logger.tracking_uri (a server that asks for a "
        "login reads MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or "
        "MLFLOW_TRACKING_TOKEN), start the server (for local development `python -m "
        "evalharness.tracking.server` starts one on PostgreSQL and prints its URI), or run with "
        "logger=none"
    ),
    "postgresql": (
        "check the host, port, database name and credentials in logger.tracking_uri (PostgreSQL: "
        "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE, or the password kept out of the "
        "URI in PGPASSWORD or a PGPASSFILE password file; the database made with createdb), point "
        "it at an MLflow server (http://HOST:PORT), or run with logger=none"
    ),
    "database": (
        "check the host, port, database name and credentials in logger.tracking_uri, point it at "
        "an MLflow server (http://HOST:PORT), or run with logger=none"
    ),
}
OTHER_FIX = (
    "correct logger.tracking_uri (sqlite:///PATH/mlflow.db, http://HOST:PORT or "
    "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE), or run with logger=none"
)


def fix_for(uri: str) -> str:
    """What to do about a store that cannot be used, for its kind: the file's folder and
    permissions for sqlite, host, port and credentials for a server or a database."""
    kind = store_kind(uri)
    if kind == "sqlite":
        db = sqlite_file(uri)
        folder = db.resolve().parent if db is not None else Path.cwd()
        return (
            f"check that {db or uri} is an MLflow sqlite database (or absent, to be created) and "
            f"that its folder is writable: {writable_path_fix(folder)}"
        )
    return FIXES.get(kind, OTHER_FIX)


def check_tracking(
    kind: str, tracking_uri: str | None, experiment_name: str, output_root: Path | None = None
) -> None:
    """Refuses a run whose tracking store cannot be used, within seconds.

    The default store (``tracking_uri`` None: a sqlite file under ``output_root``) is checked as
    if it were given when it exists; a missing one is created with the run (a refused run leaves
    no file behind), so only its folder is checked to be writable.

    Args:
        kind: ``logger.kind``; only ``mlflow`` is checked.
        tracking_uri: ``logger.tracking_uri``.
        experiment_name: ``logger.experiment_name`` (named in a refusal).
        output_root: ``output_root``, where the default store lives; None skips its check.

    Raises:
        TrackingUnavailable: the server does not answer as MLflow, or the database cannot be
            opened or created; the message names the URI (password hidden), the error and the
            fix for that kind of store. Or the experiment exists as deleted (MLflow refuses
            runs in it): the message names ``mlflow experiments restore`` and another name.
    """
    if kind != "mlflow":
        return
    shown = redacted(tracking_uri or "")
    if not tracking_uri:
        if output_root is None:
            return
        tracking_uri = default_store_uri(output_root)
        if not sqlite_file(tracking_uri).exists():
            _check_default_store(sqlite_file(tracking_uri))
            return
        shown = f"{tracking_uri} (the default store, under output_root)"
    db = sqlite_file(tracking_uri)
    if db is not None:
        _check_sqlite_path(db, shown)
    is_database = store_kind(tracking_uri) in ("sqlite", "postgresql", "database")
    if is_database:
        _check_database(tracking_uri, shown)
    try:
        with bounded_http(PROBE_RETRIES, PROBE_TIMEOUT_S):
            # Any store (server, database schema, file, plugin) answers a one-row search.
            client = open_client(tracking_uri)
            client.search_experiments(max_results=1)
            experiment = client.get_experiment_by_name(experiment_name)
    except TrackingUnavailable:
        raise
    except Exception as err:  # noqa: BLE001 - every store raises its own kind; all are refusals
        if login_refused(err):  # a server with authentication: name MLflow's variables
            raise login_refusal(err, shown, experiment_name) from None
        if db is not None and db.exists() and holds_no_runs(db):
            raise TrackingUnavailable(
                f"sqlite tracking database {shown} cannot be opened ({_reason(err, tracking_uri)})"
                " and holds no run: it was left half-created (a process stopped while MLflow "
                f"created its tables) or by another MLflow version. Fix: delete {db} (no run is "
                "lost); the next run creates it afresh. Nothing was computed."
            ) from None
        what = "tracking database" if is_database else "MLflow tracking store"
        raise TrackingUnavailable(
            f"{what} {shown} cannot be used for experiment {experiment_name!r}: "
            f"{_reason(err, tracking_uri)}. Fix: {fix_for(tracking_uri)}. Nothing was computed."
        ) from None
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        raise TrackingUnavailable(
            f"MLflow experiment {experiment_name!r} at {shown} is deleted (id "
            f"{experiment.experiment_id}), and MLflow keeps a deleted experiment's name, so no "
            "run can be recorded under it. Fix: restore it (MLFLOW_TRACKING_URI="
            f"{redacted(tracking_uri)} mlflow experiments restore --experiment-id "
            f"{experiment.experiment_id}) or give another experiment name "
            "(logger.experiment_name=NAME). Nothing was computed."
        )


def existing_store(tracking_uri: str | None, output_root: str | Path, experiment: str) -> str:
    """The URI a reader (the gate CLI, reports) opens: ``tracking_uri``, or the run's default
    store under ``output_root``; checked to exist (opening a missing sqlite file would create an
    empty store, whose emptiness a reader would report as "no run") and to answer.

    Args:
        tracking_uri: the URI given, or None for the default store.
        output_root: the runs' output root (its ``mlflow.db`` is the default store).
        experiment: the experiment the reader looks for (named in a refusal).

    Raises:
        TrackingUnavailable: the store is missing (nothing is created) or cannot be used.
    """
    uri = tracking_uri or default_store_uri(output_root)
    database = sqlite_file(uri)
    if database is not None and not database.exists():
        raise TrackingUnavailable(
            f"no tracking store at {database}: give the run's --output-root or --tracking-uri "
            "(the run prints both)"
        )
    check_tracking("mlflow", uri, experiment)
    return uri


def _check_sqlite_path(db: Path, shown: str) -> None:
    """Refuses a sqlite database whose folder (the journal is written there) or existing file is
    not writable; a missing folder is created, as MLflow would."""
    folder = db.resolve().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        blocked = _nearest_existing(folder)
        raise TrackingUnavailable(
            f"sqlite tracking database {shown}: its folder {folder} does not exist and cannot be "
            f"created ({err.strerror or err}; {blocked} is not writable). "
            f"Fix: {writable_path_fix(blocked)}. Nothing was computed."
        ) from None
    problem = _unwritable(db, folder)
    if problem:
        raise TrackingUnavailable(
            f"sqlite tracking database {shown}: {problem}. Fix: {writable_path_fix(folder)}. "
            "Nothing was computed."
        )


def _check_default_store(db: Path) -> None:
    """Refuses a default sqlite store ``db`` whose folder (``output_root``) could not be created
    or written; nothing is created here."""
    folder = _nearest_existing(db.parent)
    problem = _unwritable(db, folder)
    if problem:
        raise TrackingUnavailable(
            f"the default tracking database {db} (under output_root): {problem}. Fix: set "
            f"output_root to a writable folder, {writable_path_fix(folder)}. Nothing was computed."
        )


def _unwritable(db: Path, folder: Path) -> str | None:
    """Why sqlite could not write ``db`` in ``folder``, or None."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable {_by_whom(folder)}"
    if db.exists() and not os.access(db, os.W_OK):
        return f"the file {db} is not writable {_by_whom(db)}"
    return None


def _by_whom(path: Path) -> str:
    """Whether a read-only mount or the permissions (which root ignores) stop the write."""
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "(a read-only file system)" if read_only else "by this user"


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_database(uri: str, shown: str) -> None:
    """One SQLAlchemy connection (what MLflow's store opens, without its ten retries)."""
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    try:
        url = sqlalchemy.engine.make_url(uri)
        backend = url.get_backend_name()
        connect_args = (
            {"connect_timeout": PROBE_TIMEOUT_S} if backend in ("postgresql", "mysql") else {}
        )
        engine = sqlalchemy.create_engine(
            url, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool
        )
    except (ModuleNotFoundError, NoSuchModuleError) as err:
        raise TrackingUnavailable(
            f"tracking database {shown}: no Python driver for it ({redacted(str(err), uri)}). Fix: for PostgreSQL "
            "write postgresql+psycopg://... (psycopg 3, installed by `pip install -e "
            "'.[postgres]'`), or install the driver the URI names. Nothing was computed."
        ) from None
    except (ArgumentError, ValueError) as err:
        raise TrackingUnavailable(
            f"tracking database URI {shown} is malformed ({redacted(str(err), uri)}). Fix: {fix_for(uri)}. "
            "Nothing was computed."
        ) from None
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as err:
        raise TrackingUnavailable(
            f"tracking database {shown} cannot be opened: {_reason(err, uri)}. Fix: "
            f"{fix_for(uri)}. Nothing was computed."
        ) from None
    finally:
        engine.dispose()


def _reason(err: BaseException, uri: str) -> str:
    """The error's first lines, without the URI's password and SQLAlchemy's help link."""
    text = str(getattr(err, "orig", None) or err).split("(Background on this error")[0]
    text = " ".join(redacted(text, secret_of=uri).split())
    return f"{type(err).__name__}: {text[:500]}"
