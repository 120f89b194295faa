"""The refusal: a run stopped before any work because a setting cannot work, with the fix named.

Every check that runs before a weight is read or a folder is created (preflight's time and
memory, the compile check, the tracking probe, the multi-host config agreement) raises
:class:`PreflightRefusal`; the command line turns it into exit code 2 with its message and no
traceback. It lives below every room of the harness so that each can raise it.
"""

from __future__ import annotations

from omegaconf.errors import OmegaConfBaseException


class PreflightRefusal(RuntimeError):
    """The run would take too long or not fit; the message says the numbers and the overrides."""


# What a setting that cannot work raises before any work, refused with exit 2: ``ValueError``
# (every check's refusal names the setting and the fix), a missing file (a checkpoint, a prompt
# file) and OmegaConf's own errors (a value of the wrong type, an unknown key; some of those are
# also a ``KeyError`` or ``TypeError``). A bare ``KeyError`` or ``TypeError`` is a bug in the
# code, not a setting: it fails the command (exit 4).
CONFIG_ERRORS: tuple[type[Exception], ...] = (ValueError, FileNotFoundError, OmegaConfBaseException)
