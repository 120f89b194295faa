"""Who records the run: the MLflow client (or nothing), the probe that refuses an unusable store
in seconds, stores created once and opened safely, closing runs a killed process left open, a
local MLflow server on PostgreSQL, which process of a multi-host run writes, and the one rule
that hides a tracking URI's password from everything written down (``redaction``).
"""

from evalharness.tracking import multihost
from evalharness.tracking.ended import mark_run_ended, stale_run_closer
from evalharness.tracking.mlflow_client import (
    MlflowTracker,
    NullTracker,
    Tracker,
    closed_on_error,
    default_tracking_uri,
    ensure_experiment,
    environment_tags,
    finished_runs,
    flatten,
    log_frame_curves,
    log_routing_curve,
    make_tracker,
    run_tags,
    start_tags,
)
from evalharness.tracking.multihost import to_host
from evalharness.tracking.probe import TrackingUnavailable, check_tracking, existing_store
from evalharness.tracking.redaction import (
    redact_logs,
    redacted,
    redacted_values,
)
from evalharness.tracking.store import open_client
from evalharness.tracking.ui_view import (
    RUN_KIND_TAG,
    SEARCH_KIND,
    description_tags,
    experiment_link,
)

__all__ = [
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "TrackingUnavailable",
    "check_tracking",
    "closed_on_error",
    "default_tracking_uri",
    "description_tags",
    "ensure_experiment",
    "existing_store",
    "environment_tags",
    "finished_runs",
    "flatten",
    "log_frame_curves",
    "log_routing_curve",
    "make_tracker",
    "mark_run_ended",
    "multihost",
    "open_client",
    "redact_logs",
    "redacted",
    "redacted_values",
    "RUN_KIND_TAG",
    "SEARCH_KIND",
    "experiment_link",
    "run_tags",
    "start_tags",
    "stale_run_closer",
    "to_host",
]
