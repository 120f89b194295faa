"""The study's answer in files: the trials as :class:`TrialPoint`, the front table
(``front.md``, ``front.csv``), the figure (``front.png``), the recommended schedule and
``summary.json``, rewritten after every trial so that an interrupted search keeps what it found.

The schedule is written into the study's folder as ``conf/schedule/<name>.yaml``, so that folder
is a Hydra search path (``hydra.searchpath=[file://<study folder>/conf] schedule=<name>`` runs
it), and copying the file into ``conf/schedule/`` makes it a named schedule like the others.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from evalharness.metric_names import Metric
from evalharness.search.figure import front_figure
from evalharness.search.front import (
    KNOBS,
    TrialPoint,
    front_rows,
    front_table,
    knob_text,
    pareto_front,
    recommend,
    rounded,
    uncovered_references,
)
from evalharness.search.objectives import Reading
from kernels.policy import SparsitySchedule

if TYPE_CHECKING:
    import optuna

SCHEDULE_FIELDS = ("first_times_fp", "first_layers_fp", "density", "variant", "routing_samples")
# Trial user attributes (Optuna) the points are rebuilt from.
READINGS_ATTR = "readings"
REFERENCE_ATTR = "reference"
RUN_ID_ATTR = "mlflow_run_id"
RUN_DIR_ATTR = "run_dir"
FLOOR_ATTR = "noise_floor_db"


@dataclass(frozen=True)
class Answer:
    """What the files say.

    Attributes:
        points: every finished trial.
        recommended: the fastest trial meeting every threshold, if faster than dense (None:
            none is).
        schedule_path: its written ``conf/schedule/<name>.yaml`` (None: none).
    """

    points: list[TrialPoint]
    recommended: TrialPoint | None
    schedule_path: Path | None


def points_from_study(study: optuna.Study) -> list[TrialPoint]:
    """The study's completed trials as points (failed and running ones are left out)."""
    import optuna

    points = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs = trial.user_attrs
        readings = tuple(Reading(m, float(t), float(v)) for m, t, v in attrs.get(READINGS_ATTR, []))
        points.append(
            TrialPoint(
                number=trial.number,
                knobs={k: rounded(trial.params[k]) for k in KNOBS if k in trial.params},
                speedup=float(trial.values[0]),
                psnr=float(trial.values[1]),
                readings=readings,
                reference=attrs.get(REFERENCE_ATTR),
                run_id=attrs.get(RUN_ID_ATTR),
                run_dir=attrs.get(RUN_DIR_ATTR),
                noise_floor_db=float(attrs.get(FLOOR_ATTR, math.nan)),
            )
        )
    return points


def record_point(trial: optuna.Trial, found: Sequence[Reading], metrics: Mapping[str, Any]) -> None:
    """Keeps on a measured trial what :func:`points_from_study` reads back, its readings also as
    Optuna 5's named constraints (``<= 0`` feasible; TPE reads them)."""
    trial.set_user_attr(READINGS_ATTR, [[r.metric, r.threshold, r.value] for r in found])
    for r in found:
        trial.set_constraint(r.metric, r.constraint)
    trial.set_user_attr(RUN_ID_ATTR, metrics.get("mlflow_run_id"))
    trial.set_user_attr(RUN_DIR_ATTR, metrics.get("run_dir"))
    trial.set_user_attr(FLOOR_ATTR, float(metrics.get(Metric.NOISE_FLOOR_PSNR_DB, math.nan)))


def write_answer(
    folder: Path,
    points: Sequence[TrialPoint],
    *,
    psnr_label: str,
    limits: Mapping[str, float],
    schedule_name: str,
    provenance: str,
) -> Answer:
    """Writes the front's files and, when a trial meets every threshold, its schedule file.

    Args:
        folder: the study's folder.
        points: the finished trials.
        psnr_label: the PSNR objective's metric, e.g. ``psnr_db_mean``.
        limits: the gate's thresholds by metric (``psnr_db``, ``speedup``, ...).
        schedule_name: the recommended schedule's name (its file's stem).
        provenance: one line on where the numbers come from (suite, model, platform), written
            into the schedule file's header.
    """
    points = list(points)
    (folder / "front.md").write_text(front_table(points, psnr_label) + "\n")
    _write_csv(folder / "front.csv", points)
    front_figure(points, folder / "front.png", psnr_label, limits)
    best = recommend(points)
    path = None
    if best is not None:
        met = ", ".join(f"{k} >= {v:g}" for k, v in limits.items()) or "no threshold set"
        comment = (
            f"Found by python -m evalharness.search: trial {best.number} of {len(points)}, the "
            f"fastest that met every threshold ({met}) and beat dense.\n"
            f"Measured: speedup {best.speedup:.3f}x, {psnr_label} {best.psnr:.2f} dB; "
            f"{provenance}."
        )
        path = write_schedule(folder, schedule_name, best.knobs, comment)
    summary = {
        "trials": len(points),
        "recommended": None if best is None else _point_dict(best),
        "schedule_file": None if path is None else str(path),
        "front": [_point_dict(p) for p in pareto_front(points)],
        "references_not_covered": [p.reference for p in uncovered_references(points)],
        "psnr_metric": psnr_label,
        "thresholds": dict(limits),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return Answer(points, best, path)


def _point_dict(p: TrialPoint) -> dict[str, Any]:
    return {
        "trial": p.number,
        "knobs": dict(p.knobs),
        Metric.SPEEDUP: p.speedup,
        "psnr": p.psnr,
        "feasible": p.feasible,
        "reference": p.reference,
        "mlflow_run_id": p.run_id,
        "run_dir": p.run_dir,
    }


def _write_csv(path: Path, points: Sequence[TrialPoint]) -> None:
    rows = front_rows(points)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def answer_lines(answer: Answer, psnr_label: str, schedule_name: str) -> list[str]:
    """The search's closing lines: the front, the recommendation and how to run it."""
    front = pareto_front(answer.points)
    lines = [f"front ({len(front)} of {len(answer.points)} trials):"]
    lines += [
        f"  trial {p.number}: speedup {p.speedup:.3f}x, {psnr_label} {p.psnr:.2f} dB, "
        f"{'meets' if p.feasible else 'misses'} the gate ({knob_text(p.knobs)})"
        + (f" [{p.reference}]" if p.reference else "")
        for p in front
    ]
    uncovered = uncovered_references(answer.points)
    if uncovered:
        lines.append("not dominated by the front: " + ", ".join(p.reference for p in uncovered))
    best = answer.recommended
    if best is not None and answer.schedule_path is not None:
        lines.append(
            f"recommended: trial {best.number}, speedup {best.speedup:.3f}x, {psnr_label} "
            f"{best.psnr:.2f} dB ({knob_text(best.knobs)}): {answer.schedule_path}"
        )
        conf = answer.schedule_path.resolve().parents[1]
        lines += [
            f"run it: python -m evalharness 'hydra.searchpath=[file://{conf}]' "
            f"schedule={schedule_name}",
            f"or keep it: cp {answer.schedule_path} conf/schedule/ && python -m evalharness "
            f"schedule={schedule_name}",
        ]
    return lines


def schedule_text(name: str, knobs: Mapping[str, Any], comment: str) -> str:
    """The YAML of a schedule group file, read back through :class:`SparsitySchedule` first so
    that a file the run would refuse is never written.

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
    SparsitySchedule.from_mapping(values)
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
