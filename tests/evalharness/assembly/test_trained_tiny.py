"""``model=tiny``: the trained tiny model shipped in the package, or a ``python -m
models.training`` export of its architecture."""

from __future__ import annotations

import json

import pytest
from flax import nnx

from evalharness.assembly import build_components, fetch_checkpoint, transformer_config_for
from evalharness.config.schemas import ModelConfig
from models.config import get_transformer_config
from models.shipped_weights import shipped_checkpoint
from models.training.export import export_checkpoint, folder_megabytes
from models.training.flow_stage import TextToVideo
from models.training.settings import TrainSettings, preset
from models.vae_encoder import WanAutoencoder


def test_without_a_checkpoint_it_reads_the_weights_shipped_in_the_package():
    folder = shipped_checkpoint("tiny")
    assert fetch_checkpoint(ModelConfig(name="tiny")).transformer == folder / "transformer"
    assert transformer_config_for(ModelConfig(name="tiny")) == get_transformer_config("tiny")
    assert folder_megabytes(folder) <= 20
    assert shipped_checkpoint("tiny-planted") is None


def test_the_shipped_weights_record_the_commands_and_settings_that_trained_them():
    record = json.loads((shipped_checkpoint("tiny") / "training.json").read_text())
    assert record["command"][1:4] == ["-m", "models.training", "--out"]
    assert "--preset" in record["command"] and "full" in record["command"]
    assert TrainSettings(**record["settings"]) == preset("full")
    assert len(record["code"]["commit"]) == 40
    # The full preset's decoder stage ran later, on the first sitting's export.
    decoder = record["decoder_stage"]
    assert decoder["command"][1:3] == ["-m", "models.training.refine_decoder"]
    assert len(decoder["code"]["commit"]) == 40
    assert not decoder["code"]["models_changed_since_commit"]


@pytest.mark.slow  # exports and loads a full-size tiny model (8 s)
def test_an_export_of_the_training_command_runs_as_the_tiny_architecture(tmp_path):
    settings = preset("full")  # the architecture of the full plan; weights untrained
    model = TextToVideo(settings, rngs=nnx.Rngs(0))
    folder = export_checkpoint(
        tmp_path / "checkpoint",
        autoencoder=WanAutoencoder(settings.vae_config(), rngs=nnx.Rngs(0)),
        text_encoder=model.text_encoder,
        transformer=model.transformer,
        settings=settings,
        command=["python", "-m", "models.training"],
        metrics={},
    )
    config = ModelConfig(name="tiny", checkpoint=str(folder))
    assert transformer_config_for(config) == get_transformer_config("tiny")
    parts = build_components(config, "float32", tmp_path / "cache")
    assert parts.tiling is None  # the tiny VAE decodes the whole latent, as the seeded presets
    assert parts.identity.startswith("tiny|transformer=")
    assert parts.prompt_encoder.encode(["a red circle"]).shape == (1, 128, 64)
