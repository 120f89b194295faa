"""Fail fast on a tracking store that cannot be used, before any model is built or compiled.

MLflow's HTTP client retries a failed request with exponential backoff for minutes
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES=7``, ``MLFLOW_HTTP_REQUEST_TIMEOUT=120`` s), and its SQL store
retries opening a database ten times over about 100 s. That patience suits a run that has results
to save; at the start of one it only delays the answer "this URI is wrong". So before anything
else the run asks the store once, with the retries and the timeout bounded: a server with one
retry and a :data:`PROBE_TIMEOUT_S` timeout (MLflow's own environment variables, set for the probe
only), a database with one SQLAlchemy connection and a connect timeout. A refusal is a
:class:`~evalharness.admission.preflight.PreflightRefusal` (exit code 2, no traceback) that names the URI,
its password hidden, and the fix. The run's own requests keep MLflow's defaults, so a server that
blips mid-run does not lose finished results.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from evalharness.refusal import PreflightRefusal
from evalharness.tracking.postgres import redacted

PROBE_TIMEOUT_S = 5
PROBE_RETRIES = 1
SERVER_FIX = (
    "start the server (for local development `python -m evalharness.tracking.server` starts one "
    "on PostgreSQL and prints its URI), correct logger.tracking_uri, or run with logger=none"
)
DATABASE_FIX = (
    "check the host, port, database name and credentials in logger.tracking_uri (PostgreSQL: "
    "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE, the database made with createdb), "
    "point it at an MLflow server (http://HOST:PORT), or run with logger=none"
)


class TrackingUnavailable(PreflightRefusal):
    """``logger.tracking_uri`` names a store that cannot be reached or opened; nothing ran."""


def check_tracking(kind: str, tracking_uri: str | None, experiment_name: str) -> None:
    """Refuses a run whose tracking store cannot be used, within seconds.

    The default store (``tracking_uri`` None: a sqlite file under ``output_root``) is created
    with the run and is not probed, so a refused run leaves no file behind.

    Args:
        kind: ``logger.kind``; only ``mlflow`` is checked.
        tracking_uri: ``logger.tracking_uri``.
        experiment_name: ``logger.experiment_name`` (named in a refusal).

    Raises:
        TrackingUnavailable: the server does not answer as MLflow, or the database cannot be
            opened; the message names the URI (password hidden), the error and the fix.
    """
    if kind != "mlflow" or not tracking_uri:
        return
    from mlflow.store.db.db_types import DATABASE_ENGINES

    shown = redacted(tracking_uri)
    scheme = urlsplit(tracking_uri).scheme.lower()
    is_database = scheme.split("+")[0] in DATABASE_ENGINES
    if is_database:
        _check_database(tracking_uri, shown)
    try:
        with _bounded_http():
            from mlflow.tracking import MlflowClient

            # Any store (server, database schema, file, plugin) answers a one-row search.
            MlflowClient(tracking_uri=tracking_uri).search_experiments(max_results=1)
    except Exception as err:  # noqa: BLE001 - every store raises its own kind; all are refusals
        what = "tracking database" if is_database else "MLflow tracking store"
        fix = DATABASE_FIX if is_database else SERVER_FIX
        raise TrackingUnavailable(
            f"{what} {shown} cannot be used for experiment {experiment_name!r}: "
            f"{_reason(err, tracking_uri)}. Fix: {fix}. Nothing was computed."
        ) from None


@contextlib.contextmanager
def _bounded_http() -> Iterator[None]:
    """MLflow's HTTP retries and timeout bounded for the probe, restored after. The variables are
    process-wide; the probe runs before the run starts any thread."""
    from mlflow.environment_variables import (
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
        MLFLOW_HTTP_REQUEST_TIMEOUT,
    )

    bounds = {
        MLFLOW_HTTP_REQUEST_MAX_RETRIES.name: str(PROBE_RETRIES),
        MLFLOW_HTTP_REQUEST_TIMEOUT.name: str(PROBE_TIMEOUT_S),
    }
    saved = {name: os.environ.get(name) for name in bounds}
    os.environ.update(bounds)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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
        if backend == "sqlite" and url.database not in (None, "", ":memory:"):
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)  # as MLflow does
        engine = sqlalchemy.create_engine(
            url, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool
        )
    except (ModuleNotFoundError, NoSuchModuleError) as err:
        raise TrackingUnavailable(
            f"tracking database {shown}: no Python driver for it ({err}). Fix: for PostgreSQL "
            "write postgresql+psycopg://... (psycopg 3, installed by `pip install -e "
            "'.[postgres]'`), or install the driver the URI names. Nothing was computed."
        ) from None
    except (ArgumentError, ValueError) as err:
        raise TrackingUnavailable(
            f"tracking database URI {shown} is malformed ({err}). Fix: {DATABASE_FIX}. "
            "Nothing was computed."
        ) from None
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as err:
        raise TrackingUnavailable(
            f"tracking database {shown} cannot be opened: {_reason(err, uri)}. Fix: "
            f"{DATABASE_FIX}. Nothing was computed."
        ) from None
    finally:
        engine.dispose()


def _reason(err: BaseException, uri: str) -> str:
    """The error's first lines, without the URI's password and SQLAlchemy's help link."""
    text = str(getattr(err, "orig", None) or err).split("(Background on this error")[0]
    password = urlsplit(uri).password
    if password:
        text = text.replace(password, "***")
    text = " ".join(text.split())
    return f"{type(err).__name__}: {text[:500]}"
