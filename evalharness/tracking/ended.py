"""Closing an MLflow run that its process left open (killed, machine lost), which a dashboard
would otherwise read as still in progress: the run's next start finds the stale run folder and
closes the run it recorded (:func:`stale_run_closer`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from evalharness.tracking.redaction import redacted
from evalharness.tracking.store import bounded_http, open_client, sqlite_file

log = logging.getLogger(__name__)

FAILURE_REASON_TAG = "failure_reason"
ENDED_STATUSES = ("FAILED", "KILLED")
EndedStatus = Literal["FAILED", "KILLED"]
# MLflow's statuses of a run that has not ended.
OPEN_STATUSES = ("RUNNING", "SCHEDULED")
# Recovery happens at a run's start: a server that does not answer must not hold it for minutes.
MARK_RETRIES = 1
MARK_TIMEOUT_S = 10


def mark_run_ended(tracking_uri: str, run_id: str, status: EndedStatus, reason: str) -> bool:
    """Closes run ``run_id`` (and its open child runs: a prompt suite's pairs) as ``status``, with
    ``reason`` in its ``failure_reason`` tag, if it is still open. Never raises for the store's
    sake (a missing sqlite store is not created): recovery goes on.

    Args:
        tracking_uri: the store the run was logged to, with its credentials (or with none, for
            a store that takes them from the environment).
        run_id: the MLflow run (``Tracker.run_id``).
        status: ``FAILED`` (the process died) or ``KILLED`` (it was stopped).
        reason: why, e.g. "process 1234 on host-a exited without closing the run".

    Returns:
        True when this call closed the run; False when it had ended or could not be reached.

    Raises:
        ValueError: ``status`` is not ``FAILED`` or ``KILLED``.
    """
    if status not in ENDED_STATUSES:
        raise ValueError(f"status must be one of {ENDED_STATUSES}, got {status!r}")
    shown = redacted(tracking_uri)
    db = sqlite_file(tracking_uri)
    if db is not None and not db.is_file():
        log.info("MLflow run %s not marked %s: no tracking database %s", run_id, status, db)
        return False
    try:
        with bounded_http(MARK_RETRIES, MARK_TIMEOUT_S):
            client = open_client(tracking_uri)
            run = client.get_run(run_id)
            if run.info.status not in OPEN_STATUSES:
                log.info("MLflow run %s already ended (%s)", run_id, run.info.status)
                return False
            children = client.search_runs(
                [run.info.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{run_id}'",
                max_results=1000,
            )
            open_children = [c.info.run_id for c in children if c.info.status in OPEN_STATUSES]
            for open_run in [*open_children, run_id]:  # the parent last: it says the whole ended
                client.set_tag(open_run, FAILURE_REASON_TAG, reason[:5000])
                client.set_terminated(open_run, status=status)
    except Exception as err:  # noqa: BLE001 - recovery goes on whatever the store raised
        why = redacted(str(err), secret_of=tracking_uri)
        log.warning("could not mark MLflow run %s %s at %s: %s", run_id, status, shown, why)
        return False
    log.info("MLflow run %s marked %s at %s: %s", run_id, status, shown, reason)
    return True


def stale_run_closer(known_uri: str | None) -> Callable[[str, str, EndedStatus, str], bool]:
    """:func:`mark_run_ended` for a run folder's record, whose tracking URI is written down with
    its password hidden: ``known_uri`` (the starting run's ``logger.tracking_uri``) connects when
    it names the same store; another store takes its credentials from the environment
    (``PGPASSWORD``, ``PGPASSFILE``, ``MLFLOW_TRACKING_PASSWORD``).
    """

    def close(shown_uri: str, run_id: str, status: EndedStatus, reason: str) -> bool:
        same_store = known_uri and redacted(known_uri) == shown_uri
        return mark_run_ended(known_uri if same_store else shown_uri, run_id, status, reason)

    return close
