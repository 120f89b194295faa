"""``model=tiny-shapes``: the tiny architecture read from a ``python -m models.training`` export."""

from __future__ import annotations

import pytest
from flax import nnx

from evalharness.assembly import build_components, transformer_config_for
from evalharness.config.schemas import ModelConfig
from models.config import get_transformer_config
from models.training.export import export_checkpoint
from models.training.flow_stage import TextToVideo
from models.training.settings import preset
from models.vae_encoder import WanAutoencoder


def test_without_a_checkpoint_it_says_how_to_train_one():
    with pytest.raises(ValueError, match="python -m models.training --out DIR .* model.checkpoint"):
        transformer_config_for(ModelConfig(name="tiny-shapes"))


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
    config = ModelConfig(name="tiny-shapes", checkpoint=str(folder))
    assert transformer_config_for(config) == get_transformer_config("tiny-shapes")
    parts = build_components(config, "float32", tmp_path / "cache")
    assert parts.tiling is None  # the tiny VAE decodes the whole latent, as the seeded presets
    assert parts.identity.startswith("tiny-shapes|transformer=")
    assert parts.prompt_encoder.encode(["a red circle"]).shape == (1, 128, 64)
