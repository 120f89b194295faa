"""Where the Hydra config groups live: ``evalharness/conf``, inside the package, so an installed
wheel carries them and the app runs from any folder. In the repository that folder is a link to
the top-level ``conf/``, the one copy to edit."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = (Path(__file__).resolve().parents[1] / "conf").resolve()
