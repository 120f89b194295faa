"""``python -m models.training --out DIR``: train the tiny Wan on moving shapes and export it.

Stages, in order, each resumable from its own checkpoint in ``DIR/checkpoints/``:

1. ``vae``: the autoencoder on crops; its latent statistics from full-size clips; then
   ``vae-decoder`` (when ``vae_decoder_steps`` > 0): the decoder alone, the encoder frozen;
2. ``transformer``: the text encoder and transformer with flow matching, in phases (an optional
   coarse one on many small clips, ``transformer-coarse``, then the full-size one), each on a
   pool of clips encoded once (``DIR/latents-transformer-coarse.npy``, ``DIR/latents.npy``);
3. ``export``: the diffusers-layout folder ``DIR/checkpoint`` (``models.training.export``).

Running the same command again continues where it stopped (a finished stage only reloads its
weights); ``--stop-after vae`` ends after a stage. The settings are the preset's (``--preset
full``, the shipped model's plan) with ``--set name=value`` overrides, recorded in
``DIR/settings.json``; a folder trained with other settings is refused. Curves go to MLflow as a
run tagged ``run_kind=training`` (``--tracking-uri``, default the harness's ``outputs/mlflow.db``;
``--no-mlflow`` to skip), continued across resumptions.

Exit codes as the harness's: 0 done, 2 refused (bad settings, a folder of another run), 4 failed
while training, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from models.training.checkpoints import CheckpointMismatch
from models.training.settings import PRESETS, TrainSettings, preset, read_settings
from models.training.tracking import (
    DEFAULT_EXPERIMENT,
    DEFAULT_TRACKING_URI,
    CallbackLogger,
    MetricLogger,
    mlflow_run,
)

# The harness's exit codes (evalharness/exit_codes.py; models imports nothing of the harness).
EXIT_REFUSED, EXIT_FAILED, EXIT_INTERRUPTED = 2, 4, 130
STAGES = ("vae", "transformer", "export")


class Refused(ValueError):
    """Bad usage or settings: nothing was trained."""


def _parse_value(field: dataclasses.Field, text: str) -> int | float:
    try:
        return float(text) if isinstance(field.default, float) else int(text)
    except ValueError:
        kind = "a number" if isinstance(field.default, float) else "an integer"
        raise Refused(f"--set {field.name}={text}: expected {kind}") from None


def settings_from(args: argparse.Namespace) -> TrainSettings:
    """The preset with ``--set`` overrides, checked."""
    fields = {f.name: f for f in dataclasses.fields(TrainSettings)}
    overrides = {}
    for item in args.set:
        name, sep, text = item.partition("=")
        if not sep or name not in fields:
            raise Refused(
                f"--set {item}: expected name=value with a name among {', '.join(fields)}"
            )
        overrides[name] = _parse_value(fields[name], text)
    try:
        return preset(args.preset, **overrides)
    except ValueError as e:
        raise Refused(str(e)) from None


def claim_folder(run_dir: Path, settings: TrainSettings) -> None:
    """Writes ``settings.json``, or checks that an existing one has the same settings."""
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
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(settings.to_json())


class _Recorder:
    """Passes metrics on and keeps each one's latest values (for ``training.json``)."""

    def __init__(self, inner: MetricLogger) -> None:
        self.inner = inner
        self.history: dict[str, list[float]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
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
def _logger(args: argparse.Namespace, settings: TrainSettings) -> Iterator[MetricLogger]:
    if args.no_mlflow:
        yield CallbackLogger(lambda *_: None)
        return
    params = {k: str(v) for k, v in dataclasses.asdict(settings).items()}
    params["preset"] = args.preset
    with mlflow_run(
        args.tracking_uri, args.experiment, f"train-{Path(args.out).name}", params
    ) as logger:
        yield logger


def train(args: argparse.Namespace, argv: list[str]) -> Path | None:
    """Runs the stages; returns the exported folder (None when stopped earlier)."""
    from models.training.export import export_checkpoint, folder_megabytes
    from models.training.flow_stage import train_phases
    from models.training.vae_stage import fine_tune_decoder, train_vae

    settings = settings_from(args)
    run_dir = Path(args.out)
    claim_folder(run_dir, settings)
    progress = not args.quiet
    with _logger(args, settings) as base:
        recorder = _Recorder(base)
        autoencoder = train_vae(settings, run_dir, recorder, progress=progress)
        if settings.vae_decoder_steps:
            autoencoder = fine_tune_decoder(
                autoencoder, settings, run_dir, recorder, progress=progress
            )
        if args.stop_after == "vae":
            return None
        model = train_phases(autoencoder, settings, run_dir, recorder, progress=progress)
        if args.stop_after == "transformer":
            return None
        folder = export_checkpoint(
            run_dir / "checkpoint",
            autoencoder=autoencoder,
            text_encoder=model.text_encoder,
            transformer=model.transformer,
            settings=settings,
            command=["python", "-m", "models.training", *argv],
            metrics=recorder.summary(),
        )
        size = folder_megabytes(folder)
        recorder.log_metrics({"checkpoint_mb": size}, settings.transformer_steps)
        return folder


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m models.training",
        description="Train the tiny Wan on moving-shapes clips and export a diffusers folder.",
    )
    parser.add_argument("--out", required=True, help="run folder (created; resumed if present)")
    parser.add_argument("--preset", default="full", choices=sorted(PRESETS))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--stop-after", choices=STAGES[:-1], default=None)
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    parser.add_argument("--no-mlflow", action="store_true", help="log nowhere")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse printed its own usage line
        return 0 if e.code == 0 else EXIT_REFUSED
    logging.basicConfig(level=logging.WARNING)
    try:
        folder = train(args, argv)
    except (Refused, CheckpointMismatch) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a failure while training: one line, no traceback
        print(f"error: training failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    if folder is not None:
        print(json.dumps({"checkpoint": str(folder)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
