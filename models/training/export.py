"""The trained model as a diffusers-layout folder that ``models.checkpoint`` loads like a real Wan.

``transformer/``, ``vae/``, ``text_encoder/`` (configs + safetensors, float16 storage),
``tokenizer/tokenizer.json`` (the word-level vocabulary the model was trained with,
``models.training.flow_stage.prompt_tokenizer``), ``scheduler/``,
``model_index.json``, and ``training.json``: the command, the settings, the code version and the
final metrics, beside the weights.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from models.loading import diffusers_key_map
from models.text_encoder import save_umt5_encoder
from models.tokenizer import WordTokenizer
from models.training.flow_stage import prompt_tokenizer
from models.training.settings import TrainSettings
from models.transformer import WanTransformer
from models.vae_encoder import WanAutoencoder, save_autoencoder

STORAGE_DTYPE = np.float16


def _to_torch_layout(value: np.ndarray, transform_name: str) -> np.ndarray:
    """The inverse of ``models.loading``'s per-key transform (linear: transpose; patch conv:
    ``[in, t, h, w, out]`` → ``[out, in, t, h, w]``)."""
    if transform_name == "_linear":
        return value.T
    if transform_name == "_conv3d":
        return np.transpose(value, (4, 0, 1, 2, 3))
    if transform_name == "_identity":
        return value
    raise ValueError(f"no inverse for the loading transform {transform_name}")


def save_transformer(transformer: WanTransformer, folder: Path) -> None:
    """``config.json`` and ``diffusion_pytorch_model.safetensors`` of ``WanTransformer3DModel``."""
    folder.mkdir(parents=True, exist_ok=True)
    fields = dataclasses.asdict(transformer.config)
    fields.pop("text_len")
    fields["patch_size"] = list(fields["patch_size"])
    config = {"_class_name": "WanTransformer3DModel", **fields}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = nnx.state(transformer, nnx.Param)
    tensors = {}
    for key, (path, transform) in diffusers_key_map(transformer.config).items():
        node = state
        for part in path:
            node = node[part]
        value = np.asarray(node.get_value() if hasattr(node, "get_value") else node)
        # Contiguous: safetensors writes an array's memory as it lies, whatever its strides.
        torch_value = _to_torch_layout(value, transform.__name__).astype(STORAGE_DTYPE)
        tensors[key] = np.ascontiguousarray(torch_value)
    save_file(tensors, str(folder / "diffusion_pytorch_model.safetensors"))


def save_word_tokenizer(folder: Path, tokenizer: WordTokenizer) -> None:
    """``tokenizer.json``: a word-level vocabulary with ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2 and
    the words at ``3 + i``, lower-cased and split by the ``Whitespace`` pre-tokenizer, so that
    ``models.tokenizer.TokenizerJsonTokenizer`` reads exactly ``tokenizer``'s ids from it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {"<pad>": tokenizer.pad_id, "</s>": tokenizer.eos_id, "<unk>": tokenizer.unk_id}
    vocab.update({w: 3 + i for i, w in enumerate(tokenizer.words)})
    saved = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    saved.normalizer = normalizers.Lowercase()
    saved.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(parents=True, exist_ok=True)
    saved.save(str(folder / "tokenizer.json"))


def code_version() -> dict[str, str | bool]:
    """The git commit of the code that trained the model, and whether the tree had changes."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            out = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--", "models")
    return {"commit": commit or "unknown", "models_changed_since_commit": bool(changed)}


def _index() -> dict:
    return {
        "_class_name": "WanPipeline",
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }


def export_checkpoint(
    folder: Path,
    *,
    autoencoder: WanAutoencoder,
    text_encoder: nnx.Module,
    transformer: WanTransformer,
    settings: TrainSettings,
    command: list[str],
    metrics: dict[str, float],
) -> Path:
    """Writes the whole checkpoint folder and returns it."""
    folder = Path(folder)
    save_transformer(transformer, folder / "transformer")
    save_autoencoder(autoencoder, folder / "vae", jnp.float16)
    save_umt5_encoder(_cast(text_encoder), folder / "text_encoder")
    save_word_tokenizer(folder / "tokenizer", prompt_tokenizer())
    scheduler = {
        "_class_name": "UniPCMultistepScheduler",
        "prediction_type": "flow_prediction",
        "use_flow_sigmas": True,
        "flow_shift": settings.flow_shift,
        "num_train_timesteps": 1000,
    }
    (folder / "scheduler").mkdir(exist_ok=True)
    (folder / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler, indent=2))
    (folder / "model_index.json").write_text(json.dumps(_index(), indent=2))
    record = {
        "command": command,
        "settings": dataclasses.asdict(settings),
        "code": code_version(),
        "metrics": metrics,
    }
    (folder / "training.json").write_text(json.dumps(record, indent=2))
    return folder


def _cast(module: nnx.Module) -> nnx.Module:
    """A copy of ``module`` with every parameter in the storage dtype."""
    graphdef, state = nnx.split(module)
    state = nnx.map_state(lambda _, v: v.astype(STORAGE_DTYPE), state)
    return nnx.merge(graphdef, state)


def folder_megabytes(folder: Path) -> float:
    """Size of every file under ``folder`` in MB (10⁶ bytes)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 1e6
