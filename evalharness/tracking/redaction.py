"""Passwords out of everything the harness writes down, by the one rule for showing a tracking
URI (``models.uri_redaction.redacted``, shared with the training command).

A tracking URI may carry a password (``postgresql+psycopg://user:PASSWORD@host/db``) or a secret
query parameter (``?password=...``, ``?token=...``). The real URI is only used to connect; every
text the harness prints, logs or stores (console, ``status.json``, ``config.yaml``, MLflow params
and tags, reports, sweep and search files) shows :func:`redacted`'s form, the secret as ``***``.
Credentials may instead come from the environment (``MLFLOW_TRACKING_PASSWORD``, libpq's
``PGPASSWORD``/``PGPASSFILE``: ``docs/mlflow.md``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

from models.uri_redaction import redacted as redacted


def redacted_values(value: Any) -> Any:
    """``value`` with :func:`redacted` applied to every string in nested mappings (returned as
    dicts), lists and tuples; other values are returned as they are."""
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, Mapping):
        return {key: redacted_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redacted_values(item) for item in value]
    if isinstance(value, tuple):
        return tuple(redacted_values(item) for item in value)
    return value


def redact_logs() -> None:
    """Makes every log record of this process carry its message and traceback (an exception's
    message may quote a URI) redacted, whichever handler prints it (Hydra reconfigures its
    handlers for each job, and its launcher logs each job's overrides). Idempotent."""
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
            # What a Formatter would write (formatException: no final newline); it prints
            # exc_text as it is.
            text = "".join(traceback.format_exception(*record.exc_info)).removesuffix("\n")
            record.exc_text = redacted(text)
        return record

    redacting_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting_record)
