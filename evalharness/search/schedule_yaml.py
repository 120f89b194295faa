"""The recommended schedule as a ready-to-use ``conf/schedule/<name>.yaml``.

The file is written into the study's folder as ``conf/schedule/<name>.yaml``, so that folder is a
Hydra search path: ``python -m evalharness 'hydra.searchpath=[file://<study folder>/conf]'
schedule=<name>`` runs it as it is, and copying the file into ``conf/schedule/`` makes it a
named schedule like the others. It is read back through :class:`SparsitySchedule` before it is
kept, so a file that the run would refuse is never written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from evalharness.search.front import rounded
from kernels.policy import SparsitySchedule

SCHEDULE_FIELDS = ("first_times_fp", "first_layers_fp", "density", "variant", "routing_samples")


def schedule_text(name: str, knobs: Mapping[str, Any], comment: str) -> str:
    """The YAML of a schedule group file.

    Args:
        name: the schedule's name (also its file's stem).
        knobs: ``first_times_fp``, ``first_layers_fp``, ``density``, ``variant``,
            ``routing_samples``.
        comment: why this schedule (one or more lines, written as ``#`` comments).

    Raises:
        ValueError: a knob is missing or a value the schedule refuses (the message names it).
    """
    missing = [k for k in SCHEDULE_FIELDS if k not in knobs]
    if missing:
        raise ValueError(f"the schedule {name!r} lacks {missing}: every knob is written out")
    values = {"name": name, **{k: _plain(knobs[k]) for k in SCHEDULE_FIELDS}}
    SparsitySchedule.from_mapping(values)  # refuses what a run would refuse, before writing
    header = "".join(f"# {line}\n" for line in comment.strip().splitlines())
    body = OmegaConf.to_yaml(OmegaConf.create(values))
    return f"{header}defaults:\n  - schedule_schema\n{body}"


def _plain(value: Any) -> Any:
    """A YAML scalar: an Enum as its string, a float rounded off its binary noise."""
    return rounded(value) if isinstance(value, float | int) else str(value)


def write_schedule(folder: Path, name: str, knobs: Mapping[str, Any], comment: str) -> Path:
    """Writes ``<folder>/conf/schedule/<name>.yaml`` (through a temporary file, so a reader
    never sees half of it) and returns its path."""
    path = folder / "conf" / "schedule" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".yaml.partial")
    partial.write_text(schedule_text(name, knobs, comment))
    partial.replace(path)
    return path


def usage_lines(path: Path, name: str) -> list[str]:
    """How to run the written schedule: through a search path, or copied into ``conf/``."""
    conf = path.resolve().parents[1]
    return [
        f"run it: python -m evalharness 'hydra.searchpath=[file://{conf}]' schedule={name}",
        f"or keep it: cp {path} conf/schedule/ && python -m evalharness schedule={name}",
    ]
