"""Passwords out of everything the harness writes down, by the one rule for showing a tracking
URI (``models.uri_redaction.redacted``).

A tracking URI may carry a password (``postgresql+psycopg://user:PASSWORD@host/db``,
``http://user:PASSWORD@host``) or a secret query parameter (``?password=...``, ``?token=...``).
The real URI is only ever used to connect; every text the harness prints, logs or stores (the
console, ``status.json``, ``config.yaml``, MLflow params and tags, reports, sweep and search files)
shows :func:`redacted`'s form, the secret replaced by ``***``. Credentials need not be in the URI
at all: MLflow reads ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` for a server and
libpq ``PGPASSWORD``/``PGPASSFILE`` for PostgreSQL (``docs/mlflow.md``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

# The rule itself lives beside the models so that the training command shares it.
from models.uri_redaction import redacted as redacted


def redacted_values(value: Any) -> Any:
    """``value`` with :func:`redacted` applied to every string in it: nested mappings (as
    dicts), lists and tuples are walked; other values are returned as they are."""
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, Mapping):
        return {key: redacted_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redacted_values(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redacted_values(item) for item in value)
    return value


def connection_uri(shown: str, known: str | None) -> str:
    """The URI to connect with for ``shown``, a URI as it was written down (redacted): ``known``
    (a URI with its secrets, e.g. this run's ``logger.tracking_uri``) when it names the same
    store, else ``shown``, whose store then takes its credentials from the environment."""
    if known and redacted(known) == shown:
        return known
    return shown


def redact_logs() -> None:
    """Makes every log record of this process carry its message, and its traceback when it has
    one (``log.exception``: an exception's message may quote a URI), with :func:`redacted`
    applied, whichever handler prints it (Hydra reconfigures its handlers for each job, and its
    launcher logs each job's overrides, a tracking URI among them). Calling it again changes
    nothing."""
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def redacting_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed call: logging itself reports it on emit
            return record
        shown = redacted(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and record.exc_info[0] is not None:
            # The text a Formatter would write (formatException: no final newline), redacted; a
            # Formatter prints a record's exc_text as it is.
            text = "".join(traceback.format_exception(*record.exc_info)).removesuffix("\n")
            record.exc_text = redacted(text)
        return record

    redacting_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting_record)
