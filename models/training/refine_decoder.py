"""``python -m models.training.refine_decoder --checkpoint FOLDER --out DIR``: the decoder stage
run on an exported model whose training ran without it.

The source folder (an export of ``python -m models.training``, such as ``models/weights/tiny``)
records in ``training.json`` the settings it was trained with. This command runs the decoder
stage of ``--preset`` (``vae_decoder_*``, with ``--set`` overrides of those fields only) on the
folder's VAE, the encoder frozen, resumable in ``DIR`` like every stage, and writes
``DIR/checkpoint``: the source folder with its ``vae/`` replaced and its ``training.json``
extended. The record's ``settings`` become both sittings' settings together, its ``command`` and
``code`` stay the first sitting's, and ``decoder_stage`` holds this one's command, code version,
source and held-out PSNR before and after.

The source's weights are stored in float16, so the frozen encoder is the shipped encoder (its
latents differ from the float32 training run's by the storage rounding).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

from models.training.run_folder import (
    Recorder,
    Refused,
    add_common_arguments,
    claim_folder,
    command_main,
    metric_logger,
    out_folder,
    recorded_command,
    settings_from,
)
from models.training.settings import TrainSettings

DECODER_FIELDS = tuple(
    f.name for f in dataclasses.fields(TrainSettings) if f.name.startswith("vae_decoder_")
)


def source_record(folder: Path) -> dict:
    """The source folder's ``training.json``, checked to be a training export without a decoder
    stage."""
    path = folder / "training.json"
    if not path.is_file():
        raise Refused(
            f"{folder} has no training.json: --checkpoint takes a folder written by "
            "python -m models.training (such as models/weights/tiny)"
        )
    record = json.loads(path.read_text())
    try:
        settings = TrainSettings(**record["settings"])
    except (KeyError, TypeError, ValueError) as e:
        raise Refused(f"{path} does not hold a training run's settings ({e})") from None
    if settings.vae_decoder_steps or "decoder_stage" in record:
        raise Refused(f"{folder} was trained with a decoder stage already ({path})")
    return record


def refined_settings(record: dict, preset_name: str, assignments: list[str]) -> TrainSettings:
    """The source's settings with the preset's decoder stage (and ``--set`` overrides of it)."""
    others = [a for a in assignments if a.partition("=")[0] not in DECODER_FIELDS]
    if others:
        raise Refused(
            f"--set {others[0]}: only the decoder stage's settings ({', '.join(DECODER_FIELDS)}) "
            "can change; the rest are the source's"
        )
    plan = settings_from(preset_name, assignments)
    if not plan.vae_decoder_steps:
        raise Refused(f"preset {preset_name} has no decoder stage: --set vae_decoder_steps=N")
    decoder = {name: getattr(plan, name) for name in DECODER_FIELDS}
    return dataclasses.replace(TrainSettings(**record["settings"]), **decoder)


def refine(args: argparse.Namespace, argv: list[str]) -> Path:
    """Runs the decoder stage and writes the refined folder; returns it."""
    import jax.numpy as jnp

    from models.training.export import code_version
    from models.training.vae_stage import fine_tune_decoder, reconstruction_psnr
    from models.vae_encoder import load_autoencoder, save_autoencoder

    source = Path(args.checkpoint)
    record = source_record(source)
    settings = refined_settings(record, args.preset, args.set)
    run_dir = out_folder(args.out)
    claim_folder(run_dir, settings)
    autoencoder = load_autoencoder(source / "vae")
    before = reconstruction_psnr(autoencoder, settings, 8)
    with metric_logger(args, settings, preset=args.preset, source=str(source)) as base:
        recorder = Recorder(base)
        recorder.log_metrics({"vae_heldout_psnr_db": before}, settings.vae_steps)
        fine_tune_decoder(autoencoder, settings, run_dir, recorder, progress=not args.quiet)
    after = recorder.history["vae_heldout_psnr_db"][-1]
    folder = run_dir / "checkpoint"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder)
    save_autoencoder(autoencoder, folder / "vae", jnp.float16)
    record["settings"] = dataclasses.asdict(settings)
    record["metrics"] = {**record.get("metrics", {}), "vae_heldout_psnr_db": after}
    record["decoder_stage"] = {
        "command": recorded_command("models.training.refine_decoder", argv),
        "code": code_version(),
        "source": str(source),
        "metrics": {"vae_heldout_psnr_db_before": before, **recorder.summary()},
    }
    (folder / "training.json").write_text(json.dumps(record, indent=2))
    return folder


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m models.training.refine_decoder",
        description="Run the decoder stage on an exported tiny Wan trained without it.",
    )
    parser.add_argument("--checkpoint", required=True, help="an exported folder")
    add_common_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return command_main(build_parser(), argv, lambda args: refine(args, argv))


if __name__ == "__main__":
    sys.exit(main())
