"""Who records the run: the MLflow client (or nothing), the probe that refuses an unusable
tracking store in seconds, a local MLflow server on PostgreSQL, and which process of a
multi-host run owns the folder, the MLflow run and the videos.
"""

from evalharness.tracking import multihost
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

__all__ = [
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "TrackingUnavailable",
    "check_tracking",
    "closed_on_error",
    "default_tracking_uri",
    "ensure_experiment",
    "environment_tags",
    "finished_runs",
    "flatten",
    "log_frame_curves",
    "log_routing_curve",
    "make_tracker",
    "multihost",
    "run_tags",
    "to_host",
]
