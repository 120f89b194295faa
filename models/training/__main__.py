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

An export trained without the decoder stage gets it from ``python -m
models.training.refine_decoder``.

Exit codes as the harness's: 0 done, 2 refused before any work (bad settings, a folder of another
run, an ``--out`` that cannot be a run folder, a damaged stage checkpoint), 4 failed while
training, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from models.training.run_folder import (
    Recorder,
    add_common_arguments,
    claim_folder,
    command_main,
    metric_logger,
    out_folder,
    recorded_command,
    settings_from,
)

STAGES = ("vae", "transformer", "export")


def train(args: argparse.Namespace, argv: list[str]) -> Path | None:
    """Runs the stages; returns the exported folder (None when stopped earlier)."""
    from models.training.export import export_checkpoint, folder_megabytes
    from models.training.flow_stage import train_phases
    from models.training.vae_stage import fine_tune_decoder, train_vae

    settings = settings_from(args.preset, args.set)
    run_dir = out_folder(args.out)
    claim_folder(run_dir, settings)
    progress = not args.quiet
    with metric_logger(args, settings, preset=args.preset) as base:
        recorder = Recorder(base)
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
            command=recorded_command("models.training", argv),
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
    add_common_arguments(parser)
    parser.add_argument("--stop-after", choices=STAGES[:-1], default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return command_main(build_parser(), argv, lambda args: train(args, argv))


if __name__ == "__main__":
    sys.exit(main())
