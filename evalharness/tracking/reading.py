"""The store a reader (the gate CLI, reports) opens: it must already exist.

Opening a ``sqlite:///`` URI creates the database, and its folders, when they are missing; a run
wants that, a reader never does: a mistyped path would become an empty store whose emptiness is
then reported as "no experiment" or "no run". So a reader's store is checked to exist before it
is probed (``check_tracking``) or opened.
"""

from __future__ import annotations

from pathlib import Path

from evalharness.tracking.probe import TrackingUnavailable, check_tracking
from evalharness.tracking.store import default_store_uri, sqlite_file


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
    database = sqlite_file(uri)
    if database is not None and not database.exists():
        raise TrackingUnavailable(
            f"no tracking store at {database}: give the run's --output-root or --tracking-uri "
            "(the run prints both)"
        )
    check_tracking("mlflow", uri, experiment)
    return uri
