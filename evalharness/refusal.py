"""The refusal: a run stopped before any work because a setting cannot work, with the fix named.

Every check that runs before a weight is read or a folder is created (preflight's time and
memory, the compile check, the tracking probe, the multi-host config agreement) raises
:class:`PreflightRefusal`; the command line turns it into exit code 2 with its message and no
traceback. It lives below every room of the harness so that each can raise it.
"""

from __future__ import annotations


class PreflightRefusal(RuntimeError):
    """The run would take too long or not fit; the message says the numbers and the overrides."""
