"""Who records the run: the MLflow client (or nothing), the probe that refuses an unusable
tracking store in seconds, a new store created once when runs start together, closing a run a
killed process left open, a local MLflow server on PostgreSQL, and which process of a
multi-host run owns the folder, the MLflow run and the videos.
"""

from evalharness.tracking import multihost
from evalharness.tracking.ended import mark_run_ended
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
)
from evalharness.tracking.multihost import to_host
from evalharness.tracking.probe import TrackingUnavailable, check_tracking
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
    "environment_tags",
    "finished_runs",
    "flatten",
    "log_frame_curves",
    "log_routing_curve",
    "make_tracker",
    "mark_run_ended",
    "multihost",
    "open_client",
    "RUN_KIND_TAG",
    "SEARCH_KIND",
    "experiment_link",
    "run_tags",
    "to_host",
]
