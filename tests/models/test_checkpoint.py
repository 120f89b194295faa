"""Checkpoint folder: every part located, checked and named when missing, before any loading."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from models.checkpoint import (
    CheckpointError,
    checkpoint_prompt_encoder,
    checkpoint_vae,
    locate_checkpoint,
)
from models.text_encoder import save_umt5_encoder
from models.tiny_components import tiny_umt5_encoder, tiny_vae
from models.vae import save_vae


@pytest.fixture(scope="module")
def checkpoint_root(tmp_path_factory):
    """A complete Wan-layout folder with the tiny VAE / UMT5 and a trained sentencepiece model."""
    import sentencepiece

    root = tmp_path_factory.mktemp("Wan2.1-T2V-tiny-Diffusers")
    transformer = root / "transformer"
    transformer.mkdir()
    (transformer / "config.json").write_text(
        json.dumps(
            {
                "_class_name": "WanTransformer3DModel",
                "in_channels": 16,
                "out_channels": 16,
                "text_dim": 64,
            }
        )
    )
    save_file(
        {"dummy": np.zeros((2,), np.float32)},
        str(transformer / "diffusion_pytorch_model.safetensors"),
    )
    save_vae(tiny_vae(0), root / "vae")
    save_umt5_encoder(tiny_umt5_encoder(0), root / "text_encoder")
    tokenizer = root / "tokenizer"
    tokenizer.mkdir()
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    corpus.write_text(
        "\n".join(["a cat walks on the grass", "waves crash on the rocks at sunset"] * 30)
    )
    sentencepiece.SentencePieceTrainer.Train(
        input=str(corpus),
        model_prefix=str(tokenizer / "spiece"),
        vocab_size=20,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return root


def _copy(root, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(root, dst)
    return dst


def test_complete_folder_loads_the_same_components(checkpoint_root, tmp_path):
    ckpt = locate_checkpoint(checkpoint_root)
    assert ckpt.vae == checkpoint_root / "vae" and ckpt.tokenizer == checkpoint_root / "tokenizer"
    vae = checkpoint_vae(ckpt)
    for ours, tiny in zip(
        jax.tree.leaves(nnx.state(vae, nnx.Param)),
        jax.tree.leaves(nnx.state(tiny_vae(0), nnx.Param)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(tiny))
    encoder = checkpoint_prompt_encoder(ckpt, max_length=16, cache_dir=tmp_path)
    # Building it reads no weights: only the tokenizer and config.json (for dim).
    assert encoder.loads == 0 and encoder.encoder is None and encoder.dim == 64
    context = encoder.encode(["a cat walks on the grass"])
    assert context.shape == (1, 16, 64)
    assert encoder.loads == 1 and encoder.encoder is None  # loaded for the miss, then released
    assert encoder.identity.startswith("umt5:") and "spm:" in encoder.identity


def test_missing_parts_are_all_named(checkpoint_root, tmp_path):
    root = _copy(checkpoint_root, tmp_path)
    shutil.rmtree(root / "vae")
    (root / "tokenizer" / "spiece.model").unlink()
    with pytest.raises(CheckpointError) as err:
        locate_checkpoint(root)
    message = str(err.value)
    assert "missing sub-folder vae/" in message
    assert "tokenizer/ has no tokenizer file" in message and "spiece.model" in message
    assert "transformer" not in message.replace(str(root), "")


def test_missing_root_and_missing_weights(checkpoint_root, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        locate_checkpoint(tmp_path / "nowhere")
    root = _copy(checkpoint_root, tmp_path)
    (root / "text_encoder" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"text_encoder/: No weights"):
        locate_checkpoint(root)


def test_corrupt_safetensors_is_reported_before_loading(checkpoint_root, tmp_path):
    root = _copy(checkpoint_root, tmp_path)
    path = root / "vae" / "diffusion_pytorch_model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"vae/: .*not a readable safetensors"):
        locate_checkpoint(root)


def test_mismatched_latent_channels_and_text_width(checkpoint_root, tmp_path):
    root = _copy(checkpoint_root, tmp_path)
    cfg_path = root / "transformer" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(in_channels=32, text_dim=4096)
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as err:
        locate_checkpoint(root)
    assert "in_channels=32 does not match the VAE's latent channels z_dim=16" in str(err.value)
    assert "text_dim=4096 does not match the text encoder's d_model=64" in str(err.value)
