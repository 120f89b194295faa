"""A diffusers ``Wan2.1-T2V-*-Diffusers`` folder: find every part and check it before generating.

:func:`locate_checkpoint` checks, without loading any weights, that ``transformer/``, ``vae/``,
``text_encoder/`` and ``tokenizer/`` exist with their configs, readable safetensors headers and a
tokenizer that loads, and that the parts agree (latent channels, text width). Every problem is
reported at once, each by the name of the missing part, so a run stops before any generation.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

import jax
import jax.numpy as jnp

from models.prompt_encoder import PromptEncoder
from models.safetensors_reader import WeightsError, find_weight_files, read_json
from models.text_encoder import TEXT_ENCODER_WEIGHT_STEMS, UMT5Config, load_umt5_encoder
from models.tokenizer import load_tokenizer
from models.vae import VAE_WEIGHT_STEMS, WanVAE, load_vae

TRANSFORMER_WEIGHT_STEMS = ("diffusion_pytorch_model",)
TOKENIZER_FILES = ("spiece.model", "tokenizer.json")


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete or inconsistent; the message lists every problem."""


@dataclasses.dataclass(frozen=True)
class WanCheckpoint:
    """Paths of the parts of a checkpoint folder (all checked to exist)."""

    root: Path
    transformer: Path
    vae: Path
    text_encoder: Path
    tokenizer: Path


def _check_weighted_part(folder: Path, part: str, stems: tuple[str, ...], problems: list[str]):
    if not folder.is_dir():
        problems.append(f"missing sub-folder {part}/ ({folder})")
        return None
    try:
        config = read_json(folder / "config.json")
    except WeightsError as e:
        problems.append(f"{part}/: {e}")
        config = None
    try:
        find_weight_files(folder, stems)
    except WeightsError as e:
        problems.append(f"{part}/: {e}")
    return config


def locate_checkpoint(path: str | Path) -> WanCheckpoint:
    """Finds and checks the parts of a diffusers Wan 2.1 checkpoint folder.

    Args:
        path: e.g. ``/models/Wan2.1-T2V-1.3B-Diffusers``.

    Returns:
        :class:`WanCheckpoint` with the sub-folder paths.

    Raises:
        CheckpointError (a ValueError): the folder or any part is missing (named), a config or
            safetensors file is unreadable, the tokenizer does not load, or
            transformer/VAE/text-encoder configs disagree.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise CheckpointError(
            f"Checkpoint folder {root} does not exist; pass a diffusers Wan2.1-T2V-*-Diffusers folder "
            "holding transformer/, vae/, text_encoder/ and tokenizer/"
        )
    problems: list[str] = []
    parts = {name: root / name for name in ("transformer", "vae", "text_encoder", "tokenizer")}
    t_cfg = _check_weighted_part(
        parts["transformer"], "transformer", TRANSFORMER_WEIGHT_STEMS, problems
    )
    v_cfg = _check_weighted_part(parts["vae"], "vae", VAE_WEIGHT_STEMS, problems)
    e_cfg = _check_weighted_part(
        parts["text_encoder"], "text_encoder", TEXT_ENCODER_WEIGHT_STEMS, problems
    )
    tok = parts["tokenizer"]
    if not tok.is_dir():
        problems.append(f"missing sub-folder tokenizer/ ({tok})")
    elif not any((tok / f).is_file() for f in TOKENIZER_FILES):
        problems.append(
            f"tokenizer/ has no tokenizer file: expected one of {list(TOKENIZER_FILES)}"
        )
    else:  # read now (a second or so), not after the run folder and the model exist
        try:
            load_tokenizer(tok)
        except ValueError as e:
            problems.append(f"tokenizer/: {e}")
    if t_cfg is not None and v_cfg is not None:
        z_dim = v_cfg.get("z_dim")
        for key in ("in_channels", "out_channels"):
            if t_cfg.get(key) != z_dim:
                problems.append(
                    f"transformer {key}={t_cfg.get(key)} does not match the VAE's latent channels "
                    f"z_dim={z_dim}"
                )
    if t_cfg is not None and e_cfg is not None and t_cfg.get("text_dim") != e_cfg.get("d_model"):
        problems.append(
            f"transformer text_dim={t_cfg.get('text_dim')} does not match the text encoder's "
            f"d_model={e_cfg.get('d_model')}"
        )
    if problems:
        raise CheckpointError(
            f"Checkpoint {root} is not usable:\n  - "
            + "\n  - ".join(problems)
            + "\nFix: restore each named part from the original checkpoint, or point "
            "model.checkpoint at a complete one"
        )
    return WanCheckpoint(root=root, **parts)


def text_encoder_identity(checkpoint: WanCheckpoint, param_dtype) -> str:
    """Cache identity of the checkpoint's text encoder: config, weight file names/sizes, dtype."""
    h = hashlib.sha256((checkpoint.text_encoder / "config.json").read_bytes())
    for f in sorted(checkpoint.text_encoder.glob("*.safetensors")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    h.update(jnp.dtype(param_dtype).name.encode())
    return "umt5:" + h.hexdigest()[:16]


def checkpoint_prompt_encoder(
    checkpoint: WanCheckpoint,
    *,
    max_length: int = 512,
    cache_dir: str | Path | None = None,
    param_dtype=jnp.float32,
    device: jax.Device | None = None,
) -> PromptEncoder:
    """The checkpoint's tokenizer and (lazily loaded) UMT5 encoder as a :class:`PromptEncoder`.

    Only the tokenizer and ``text_encoder/config.json`` are read here; the weights are read when a
    prompt misses the cache and freed right after encoding (see :mod:`models.prompt_encoder`).

    Args:
        checkpoint: from :func:`locate_checkpoint`.
        max_length: text length L (512 as in Wan 2.1).
        cache_dir: prompt-embedding cache folder, or None.
        param_dtype: encoder weights dtype (bfloat16 halves UMT5-XXL's ~23 GB of float32).
        device: where the encoder is loaded and run (``jax.devices("cpu")[0]`` keeps it off the
            accelerator); None for JAX's default device.
    """
    tokenizer = load_tokenizer(checkpoint.tokenizer)
    config_path = checkpoint.text_encoder / "config.json"
    config = UMT5Config.from_dict(read_json(config_path), source=str(config_path))
    identity = f"{text_encoder_identity(checkpoint, param_dtype)}|{tokenizer.identity}"
    return PromptEncoder(
        tokenizer=tokenizer,
        loader=functools.partial(
            load_umt5_encoder, checkpoint.text_encoder, param_dtype=param_dtype
        ),
        config=config,
        max_length=max_length,
        identity=identity,
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
        device=device,
    )


def checkpoint_vae(checkpoint: WanCheckpoint, *, param_dtype=jnp.float32) -> WanVAE:
    """The checkpoint's VAE decoder (see :func:`models.vae.load_vae`)."""
    return load_vae(checkpoint.vae, param_dtype=param_dtype)
