"""The store a reader (the gate CLI, reports) opens: it must already exist.

Opening a ``sqlite:///`` URI creates the database, and its folders, when they are missing; a run
wants that, a reader never does: a mistyped path would become an empty store whose emptiness is
then reported as "no experiment" or "no run". So a reader's store is checked to exist before it
is probed (``check_tracking``) or opened.
"""

from __future__ import annotations

from pathlib import Path

from evalharness.tracking.probe import TrackingUnavailable, check_tracking
from evalharness.tracking.store import default_store_uri

SQLITE_PREFIX = "sqlite:///"


def missing_sqlite_store(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI when it does not exist, else None."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    path = Path(uri[len(SQLITE_PREFIX) :])
    return None if path.exists() else path


def existing_store(tracking_uri: str | None, output_root: str | Path, experiment: str) -> str:
    """The URI a reader opens: ``tracking_uri``, or the run's default store under
    ``output_root``; checked to exist and to answer.

    Args:
        tracking_uri: the URI given, or None for the default store.
        output_root: the runs' output root (its ``mlflow.db`` is the default store).
        experiment: the experiment the reader looks for (named in a refusal).

    Raises:
        TrackingUnavailable: the store is missing (nothing is created) or cannot be used.
    """
    uri = tracking_uri or default_store_uri(output_root)
    missing = missing_sqlite_store(uri)
    if missing is not None:
        raise TrackingUnavailable(
            f"no tracking store at {missing}: give the run's --output-root or --tracking-uri "
            "(the run prints both)"
        )
    check_tracking("mlflow", uri, experiment)
    return uri
