"""Passwords out of every text written down: the one rule for showing a URI, shared by the
harness (``evalharness.tracking.redaction``, which applies it to everything it prints, logs and
stores) and the training command (its recorded command line and its error lines).

A URI may carry a password (``postgresql+psycopg://user:PASSWORD@host/db``,
``http://user:PASSWORD@host``) or a secret query parameter (``?password=...``, ``?token=...``);
:func:`redacted` replaces the secret by ``***``.
"""

from __future__ import annotations

import os
import re
from typing import overload
from urllib.parse import unquote, urlsplit

MASK = "***"
# MLflow's own switch for the links it prints when a run ends (``MlflowClient.set_terminated``).
QUIET_LINKS_VAR = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
# ``scheme://user:password@``: the password runs to the authority's last ``@`` (as urlsplit reads
# it), so a password holding an unencoded ``@`` or ``:`` is hidden whole. Hydra writes an override
# back with each ``:`` escaped (``postgresql\://user\:password@``): a backslash may precede them.
_USERINFO = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*\\?://[^/?#\s:@\\]*)(?P<colon>\\?:)[^/?#\s]*@"
)
# A query parameter whose name says it holds a secret: ``?password=``, ``&sslpassword=``,
# ``?token=``, ``&access_token=``, ``?api_key=``, ``&client_secret=``.
_SECRET_PARAM = re.compile(
    r"(?P<head>[?&;][^=&#\s]*(?:password|passwd|pwd|token|secret|api_?key)\\?=)[^&#\s]*",
    re.IGNORECASE,
)


@overload
def redacted(text: str, secret_of: str | None = None) -> str: ...


@overload
def redacted(text: None, secret_of: str | None = None) -> None: ...


def redacted(text: str | None, secret_of: str | None = None) -> str | None:
    """``text`` with the password of every URI in it, and the value of every secret query
    parameter, replaced by ``***``; None stays None.

    Args:
        text: a URI, or any text that may hold URIs (a message, a note, a YAML dump).
        secret_of: a URI whose password is also hidden wherever it appears on its own (a driver's
            error message may quote the password without its URI), percent-encoded or not.
    """
    if text is None:
        return None
    shown = _USERINFO.sub(rf"\g<head>\g<colon>{MASK}@", text)
    shown = _SECRET_PARAM.sub(rf"\g<head>{MASK}", shown)
    password = urlsplit(secret_of).password if secret_of else None
    for form in {password, unquote(password or "")} - {None, "", MASK}:
        shown = shown.replace(form, MASK)
    return shown


def quiet_run_links() -> None:
    """Stops MLflow printing ``View run <name> at: <tracking URI>/#/...`` and ``View experiment
    at: ...`` on stdout whenever a client ends a run on a tracking server: it prints the URI as
    given, so a password in it would reach the console and CI logs. Sets MLflow's own switch,
    :data:`QUIET_LINKS_VAR`, for this process (forced: a run's folder, its ``status.json`` and
    the harness's own lines name the run, with the password hidden)."""
    os.environ[QUIET_LINKS_VAR] = "true"
