"""What every training command shares: its settings from a preset and ``--set`` overrides, its
run folder, where its metrics go, and how a failure becomes an exit code."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from models import interruption
from models.training.checkpoints import CheckpointMismatch, check_checkpoint
from models.training.settings import PRESETS, TrainSettings, preset, read_settings
from models.training.tracking import (
    DEFAULT_EXPERIMENT,
    DEFAULT_TRACKING_URI,
    CallbackLogger,
    MetricLogger,
    mlflow_run,
)
from models.uri_redaction import redacted

# The harness's exit codes (evalharness/exit_codes.py; models imports nothing of the harness).
EXIT_REFUSED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 4, 130, 143


class Refused(ValueError):
    """Bad usage or settings: nothing was trained."""


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--preset``, ``--set``, the MLflow options and ``--quiet``."""
    parser.add_argument("--out", required=True, help="run folder (created; resumed if present)")
    parser.add_argument("--preset", default="full", choices=sorted(PRESETS))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    parser.add_argument("--no-mlflow", action="store_true", help="log nowhere")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _parse_value(field: dataclasses.Field, text: str) -> int | float:
    try:
        return float(text) if isinstance(field.default, float) else int(text)
    except ValueError:
        kind = "a number" if isinstance(field.default, float) else "an integer"
        raise Refused(f"--set {field.name}={text}: expected {kind}") from None


def settings_from(preset_name: str, assignments: list[str]) -> TrainSettings:
    """The preset with the ``--set name=value`` assignments, checked."""
    fields = {f.name: f for f in dataclasses.fields(TrainSettings)}
    overrides = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        if not sep or name not in fields:
            raise Refused(
                f"--set {item}: expected name=value with a name among {', '.join(fields)}"
            )
        overrides[name] = _parse_value(fields[name], text)
    try:
        return preset(preset_name, **overrides)
    except ValueError as e:
        raise Refused(str(e)) from None


def out_folder(text: str) -> Path:
    """The run folder ``--out`` names, refused before any work when it cannot be one.

    Raises:
        Refused: an empty name (it would train into the current folder), or a path whose nearest
            existing part is a file.
    """
    if not text.strip():
        raise Refused(
            f"--out {text!r}: an empty name would train into the current folder; name a run "
            "folder, e.g. --out outputs/training/tiny (created if missing)"
        )
    path = Path(text)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise Refused(
            f"--out {text}: {existing} is a file, not a folder; name a run folder (created if "
            "missing) that is not a file"
        )
    return path


def claim_folder(run_dir: Path, settings: TrainSettings) -> None:
    """Writes ``settings.json``, or checks that an existing one has the same settings and that
    its stage checkpoints can be read (a damaged one is refused before any work)."""
    path = run_dir / "settings.json"
    if path.is_file():
        try:
            previous = read_settings(path)
        except (ValueError, TypeError) as e:
            raise Refused(f"{path} is not a training run's settings ({e})") from None
        if previous != settings:
            differ = [
                f"{k}: {v} in the folder vs {getattr(settings, k)}"
                for k, v in dataclasses.asdict(previous).items()
                if getattr(settings, k) != v
            ]
            raise Refused(
                f"{run_dir} was trained with other settings ({'; '.join(differ)}); resume with "
                "the same preset and --set values, or use a new --out folder"
            )
        for checkpoint in sorted((run_dir / "checkpoints").glob("*.npz")):
            check_checkpoint(checkpoint)
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(settings.to_json())
    except OSError as err:
        raise Refused(
            f"--out {run_dir}: cannot write the run folder ({type(err).__name__}: "
            f"{err.strerror or err}); name a folder this user can write"
        ) from None


class Recorder:
    """Passes metrics on and keeps each one's latest values (for ``training.json``)."""

    def __init__(self, inner: MetricLogger) -> None:
        self.inner = inner
        self.history: dict[str, list[float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Hands ``metrics`` on and keeps them."""
        self.inner.log_metrics(metrics, step)
        for k, v in metrics.items():
            self.history.setdefault(k, []).append(float(v))

    def summary(self) -> dict[str, float]:
        """The last value of each metric, and the mean of the last 50 flow losses."""
        out = {k: v[-1] for k, v in self.history.items()}
        if "flow_loss" in self.history:
            out["flow_loss_last50_mean"] = sum(self.history["flow_loss"][-50:]) / len(
                self.history["flow_loss"][-50:]
            )
        return out


@contextlib.contextmanager
def metric_logger(
    args: argparse.Namespace, settings: TrainSettings, **params: str
) -> Iterator[MetricLogger]:
    """MLflow's run ``train-<out folder name>`` with the settings and ``params`` as parameters,
    or nowhere with ``--no-mlflow``."""
    if args.no_mlflow:
        yield CallbackLogger(lambda *_: None)
        return
    values = {k: str(v) for k, v in dataclasses.asdict(settings).items()} | params
    with mlflow_run(
        args.tracking_uri, args.experiment, f"train-{Path(args.out).name}", values
    ) as logger:
        yield logger


def recorded_command(module: str, argv: list[str]) -> list[str]:
    """The command line as ``training.json`` records it, a tracking URI's password hidden."""
    return ["python", "-m", module, *(redacted(arg) for arg in argv)]


def command_main(
    parser: argparse.ArgumentParser,
    argv: list[str],
    train: Callable[[argparse.Namespace], Path | None],
) -> int:
    """Parses ``argv`` and runs ``train(args)``; prints the exported folder as JSON or one error
    line (the tracking URI's password hidden); returns the exit code (0 done, 2 refused, 4
    failed while training, 130 interrupted, 143 terminated).

    SIGINT and SIGTERM are noted and acted on at the training's safe points (each step, each
    clip of a latent pool: ``models.interruption``); a signal that came after the last one, or
    a failure that followed a signal, still ends as the signal.
    """
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse printed its own usage line
        return 0 if e.code == 0 else EXIT_REFUSED
    logging.basicConfig(level=logging.WARNING)
    interruption.handle_signals()
    try:
        folder = train(args)
    except (Refused, CheckpointMismatch) as e:
        if interruption.pending() is not None:
            return _interrupted()
        print(f"error: {redacted(str(e), args.tracking_uri)}", file=sys.stderr)
        return EXIT_REFUSED
    except (KeyboardInterrupt, interruption.Terminated):
        return _interrupted()
    except Exception as e:  # a failure while training: one line, no traceback
        if interruption.pending() is not None:
            return _interrupted()
        shown = redacted(f"{type(e).__name__}: {e}", args.tracking_uri)
        print(f"error: training failed: {shown}", file=sys.stderr)
        return EXIT_FAILED
    if interruption.pending() is not None:
        return _interrupted()
    if folder is not None:
        print(json.dumps({"checkpoint": str(folder)}))
    return 0


def _interrupted() -> int:
    """The one error line and exit code of a training stopped by SIGINT (130) or SIGTERM (143)."""
    ctrl_c = interruption.pending() in (None, signal.SIGINT)
    interruption.clear()
    what = "interrupted (Ctrl-C)" if ctrl_c else "terminated (SIGTERM)"
    print(f"error: {what}; run the same command again to resume", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED if ctrl_c else EXIT_TERMINATED
