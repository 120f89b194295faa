"""Whether a dense-cache entry is whole: the SHA-256 of each of its files, recorded when the
entry is written (``sha256.json``) and compared before it is used. A changed, missing or extra
file, a damaged ``sha256.json`` and none at all (nothing vouches for the entry) read as damage.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHECKSUMS = "sha256.json"


def _digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name != CHECKSUMS}


def write_checksums(folder: Path) -> None:
    """Records the SHA-256 of every file in ``folder`` in its ``sha256.json``."""
    sums = {name: _digest(folder / name) for name in sorted(_files(folder))}
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=2, sort_keys=True))


def damage(folder: Path) -> str | None:
    """What is wrong with the entry in ``folder``, or None when every file matches its checksum.

    Raises:
        FileNotFoundError: ``folder`` is gone (another process set it aside meanwhile).
    """
    try:
        recorded = json.loads((folder / CHECKSUMS).read_text())
    except FileNotFoundError:
        if not folder.is_dir():
            raise
        return f"it has no {CHECKSUMS}"
    except (OSError, ValueError) as err:
        return f"its {CHECKSUMS} is unreadable ({err})"
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        return f"its {CHECKSUMS} is not a table of checksums"
    present = _files(folder)
    if present != set(recorded):
        missing, extra = sorted(set(recorded) - present), sorted(present - set(recorded))
        return f"its files differ from {CHECKSUMS} (missing: {missing}, unlisted: {extra})"
    for name in sorted(recorded):
        try:
            if _digest(folder / name) != recorded[name]:
                return f"{name} does not match its checksum"
        except OSError as err:
            return f"{name} is unreadable ({err})"
    return None
