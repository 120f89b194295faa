"""Authentication for the shared tracking server, on MLflow's own basic-auth app.

``mlflow server --app-name basic-auth`` asks every request for a user name and password and keeps
users and permissions in a database of its own, named in the INI file ``MLFLOW_AUTH_CONFIG_PATH``
points at (:func:`write_auth_config`). The admin's credentials file holds one line
``USERNAME:PASSWORD`` (mode 0600; a file others can read is refused; a missing one is created
with user ``admin`` and a random password). That password reaches ``mlflow server`` only in its
environment, never a command line nor the console; MLflow creates the admin with it on an empty
user database. A new user's password is read from standard input, never the command line.
Clients send credentials in MLflow's ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalharness.tracking.redaction import redacted
from evalharness.tracking.store import TrackingUnavailable, bounded_http, environment

AUTH_APP = "basic-auth"
ADMIN_FILE = "admin.credentials"
AUTH_CONFIG_FILE = "basic_auth.ini"
DEFAULT_ADMIN = "admin"
# What every signed-in user may do on experiments they did not create: EDIT lets a team log runs
# into one shared experiment; deleting it or changing its permissions stays with its creator
# (MANAGE) and the admins.
DEFAULT_PERMISSION = "EDIT"
PERMISSIONS = ("READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS")
MIN_PASSWORD = 12  # MLflow's own rule (mlflow.utils.validation._validate_password)
# The longest user name MLflow's user table stores (mlflow.server.auth.db.models: String(255)).
MAX_USERNAME = 255
# How much of a long user name a message shows.
SHOWN_NAME = 40
USERNAME_VAR = "MLFLOW_TRACKING_USERNAME"
PASSWORD_VAR = "MLFLOW_TRACKING_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    """A user name and password (the password stays out of ``repr``)."""

    username: str
    password: str = field(repr=False)


def check_exposure(host: str, auth: bool) -> None:
    """Refuses to serve beyond this machine without authentication.

    Raises:
        ValueError: ``host`` is not a loopback address and ``auth`` is False.
    """
    if auth or is_loopback(host):
        return
    raise ValueError(
        f"--host {host} serves the tracking server beyond this machine without authentication: "
        "add --auth (MLflow's basic-auth app; users added with the add-user command), or bind "
        "--host 127.0.0.1"
    )


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (``127.0.0.0/8``, ``::1``); an
    unspecified address (``0.0.0.0``, ``::``) or a name that does not resolve is not."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def read_credentials(path: Path) -> Credentials:
    """The ``USERNAME:PASSWORD`` line of a credentials file that only its owner can read.

    Raises:
        FileNotFoundError: no such file.
        PermissionError: group or others may read or write it (fix: ``chmod 600``).
        ValueError: the line is not ``USERNAME:PASSWORD``, or the password is shorter than
            MLflow accepts.
    """
    path = Path(path)
    mode = path.stat().st_mode
    if stat.S_IMODE(mode) & 0o077:
        raise PermissionError(
            f"credentials file {path} is open to other users (mode {stat.S_IMODE(mode):o}): "
            f"run chmod 600 {path}"
        )
    line = (path.read_text(encoding="utf-8").splitlines() or [""])[0]
    username, sep, password = line.partition(":")
    if not sep or not username.strip():
        raise ValueError(
            f"credentials file {path}: its first line must be USERNAME:PASSWORD (the password "
            "is not shown)"
        )
    check_password(password, f"the password in {path}")
    return Credentials(username.strip(), password)


def check_password(password: str, what: str) -> None:
    """Refuses a password MLflow would refuse (shorter than :data:`MIN_PASSWORD`).

    Raises:
        ValueError: it is too short; ``what`` names it in the message.
    """
    if len(password) < MIN_PASSWORD:
        raise ValueError(f"{what} is shorter than {MIN_PASSWORD} characters (MLflow's minimum)")


def shown_name(username: str) -> str:
    """``username`` quoted for a message, cut to :data:`SHOWN_NAME` characters."""
    if len(username) <= SHOWN_NAME:
        return repr(username)
    return f"{username[:SHOWN_NAME]!r}... ({len(username):,} characters)"


def check_username(username: str) -> None:
    """Refuses a user name that could never sign in: basic auth sends ``NAME:PASSWORD``, split
    at the first colon, so a name with a colon is read as a shorter name; a control character
    (a newline) or surrounding spaces cannot be typed back in a login or a credentials file.

    Raises:
        ValueError: naming the user name and what to give instead.
    """
    if len(username) > MAX_USERNAME:
        raise ValueError(
            f"user name {shown_name(username)} is too long: MLflow's user table holds at most "
            f"{MAX_USERNAME} characters; give a shorter name, e.g. eve (nothing was changed)"
        )
    if ":" in username:
        why = "it holds a colon, and basic auth splits NAME:PASSWORD at the first one"
    elif not username.isprintable():
        why = "it holds a control character (a newline?)"
    elif not username.strip() or username != username.strip():
        why = "it is empty or has surrounding spaces"
    else:
        return
    raise ValueError(
        f"user name {shown_name(username)} could never sign in: {why}; give a name without colons, "
        "control characters or surrounding spaces, e.g. eve (nothing was changed)"
    )


def ensure_admin_credentials(path: Path) -> tuple[Credentials, bool]:
    """The admin's credentials from ``path``, written first (user ``admin``, a random
    password, mode 0600) when it does not exist.

    Returns:
        The credentials, and whether the file was created now.

    Raises:
        See :func:`read_credentials`.
    """
    path = Path(path)
    if path.exists():
        return read_credentials(path), False
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"{DEFAULT_ADMIN}:{password}\n")
    return Credentials(DEFAULT_ADMIN, password), True


def write_auth_config(
    path: Path, database_uri: str, admin: str, default_permission: str = DEFAULT_PERMISSION
) -> Path:
    """Writes MLflow's basic-auth config to ``path`` (its ``basic_auth.ini`` format, replaced,
    mode 0600: the user database's URI may hold a password) and returns ``path``.

    Args:
        path: the file to write.
        database_uri: the SQLAlchemy URI of the users and permissions database.
        admin: the admin's user name (the password goes in the server's environment).
        default_permission: what every signed-in user may do on others' experiments.

    Raises:
        ValueError: ``default_permission`` is not one of :data:`PERMISSIONS`.
    """
    if default_permission not in PERMISSIONS:
        raise ValueError(
            f"default permission {default_permission!r}: use one of {', '.join(PERMISSIONS)}"
        )
    text = (
        "[mlflow]\n"
        f"default_permission = {default_permission}\n"
        f"database_uri = {database_uri}\n"
        f"admin_username = {admin}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text.replace("%", "%%"))  # configparser reads % as interpolation
    return path


def server_env(config: Path, admin: Credentials) -> dict[str, str]:
    """The environment ``mlflow server --app-name basic-auth`` reads its auth settings from: the
    config file, the admin's password (used to create the admin on a new user database) and the
    key that signs the sign-up page's CSRF tokens (one per start, shared by its workers)."""
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": admin.password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
    }


def check_admin(url: str, admin: Credentials, source: Path) -> None:
    """Signs in to the server at ``url`` as ``admin`` and checks it is an admin.

    Raises:
        RuntimeError: the server refused the credentials from ``source`` (they no longer match
            the admin its user database holds) or the user is not an admin.
    """
    from mlflow.exceptions import MlflowException

    try:
        with _admin_client(url, admin) as client:
            user = client.get_user(admin.username)
    except MlflowException as err:
        raise RuntimeError(
            f"the server at {redacted(url)} refused the admin credentials in {source} ({err.error_code}): "
            "the user database keeps the admin password of its first start; put that "
            "password back in the file, or start on a fresh --folder"
        ) from None
    if not user.is_admin:
        raise RuntimeError(
            f"user {admin.username!r} in {source} is not an admin on {redacted(url)}"
        )


def add_user(url: str, admin: Credentials, source: Path, user: Credentials) -> None:
    """Adds ``user`` on the server at ``url`` (MLflow's ``AuthServiceClient.create_user``),
    signed in as ``admin``.

    Raises:
        ValueError: the user exists, or the server refused the request; the message says why
            (the admin credentials from ``source`` refused, not an admin, unreachable).
    """
    from mlflow.exceptions import MlflowException

    check_password(user.password, f"the password for {shown_name(user.username)}")
    try:
        with _admin_client(url, admin) as client:
            client.create_user(user.username, user.password)
    except MlflowException as err:
        raise ValueError(_add_user_problem(err, url, admin, source, user.username)) from None


@contextlib.contextmanager
def _admin_client(url: str, admin: Credentials) -> Iterator[Any]:
    """MLflow's client of the basic-auth app's REST API (``AuthServiceClient``), with MLflow's
    client credentials set to ``admin``'s and its HTTP retries bounded for the body."""
    import warnings

    login = {USERNAME_VAR: admin.username, PASSWORD_VAR: admin.password}
    with environment(login), bounded_http(1, 10):
        with warnings.catch_warnings():
            # Importing MLflow's server package warns about Starlette's WSGI middleware, which a
            # client never uses.
            warnings.simplefilter("ignore", UserWarning)
            from mlflow.server import get_app_client

            client = get_app_client(AUTH_APP, tracking_uri=url)
        yield client


def _add_user_problem(err, url: str, admin: Credentials, source: Path, username: str) -> str:
    """Why the server did not add ``username``, with the fix."""
    username = shown_name(username)
    code = getattr(err, "error_code", "")
    url = redacted(url)
    if code == "UNAUTHENTICATED":
        return (
            f"the server at {url} refused the admin credentials in {source} (401): give the "
            "admin's file with --admin-credentials"
        )
    if code == "PERMISSION_DENIED":
        return f"user {admin.username!r} (from {source}) is not an admin on {url} (403)"
    if code == "RESOURCE_ALREADY_EXISTS":
        return f"user {username} already exists on {url}"
    text = " ".join(str(getattr(err, "message", err)).split())[:300]
    return (
        f"the server at {url} did not add user {username} ({code}: {text}): check "
        "--tracking-uri and that the server runs with --auth"
    )


def login_refused(err: BaseException) -> bool:
    """Whether an MLflow server answered ``err`` with 401 (no or wrong credentials) or 403 (a
    user without the permission)."""
    return getattr(err, "error_code", None) in ("UNAUTHENTICATED", "PERMISSION_DENIED")


def login_refusal(err: BaseException, shown: str, experiment_name: str) -> TrackingUnavailable:
    """The refusal of a server that wants other credentials (exit code 2): who was sent (never
    the password) and MLflow's variables that carry the credentials.

    Args:
        err: what the server answered (:func:`login_refused` is true of it).
        shown: the server's URI, password redacted.
        experiment_name: the experiment the command wanted.
    """
    username = os.environ.get(USERNAME_VAR)
    if getattr(err, "error_code", None) == "PERMISSION_DENIED":
        problem = (
            f"user {username!r} may not read its experiments (403): ask its admin for access or"
        )
    elif username and os.environ.get(PASSWORD_VAR):
        problem = f"it refused user {username!r} with the password given (401):"
    else:
        problem = (
            f"it asks for a login and {USERNAME_VAR} and {PASSWORD_VAR} are not both set (401):"
        )
    return TrackingUnavailable(
        f"MLflow tracking store {shown} cannot be used for experiment {experiment_name!r}: "
        f"{problem} set {USERNAME_VAR} and {PASSWORD_VAR} to an account on that server (its "
        "admin adds one with `python -m evalharness.tracking.server add-user NAME`), or run "
        "with logger=none. Nothing was computed."
    )
