"""Paths into the repository that tests read (config groups shipped with the project)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEDULE_DIR = REPO_ROOT / "conf" / "schedule"
