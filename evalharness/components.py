"""The model parts a run needs, built from the ``model`` config group: tiny preset or checkpoint.

Both paths produce the same objects (``WanTransformer``, ``PromptEncoder``, ``WanVAE``), so the CPU
default exercises exactly the code a real ``Wan2.1-T2V-*-Diffusers`` folder takes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from evalharness.config import DType, ModelConfig
from models.checkpoint import (
    WanCheckpoint,
    checkpoint_prompt_encoder,
    checkpoint_vae,
    locate_checkpoint,
)
from models.config import WanTransformerConfig, config_differences, get_transformer_config
from models.loading import load_transformer, read_diffusers_config
from models.prompt_encoder import PromptEncoder
from models.sharding import param_shardings, place_params
from models.tiny_components import tiny_prompt_encoder, tiny_vae
from models.transformer import WanTransformer
from models.vae import TilingConfig, WanVAE, decode_to_frames

log = logging.getLogger(__name__)

_DTYPES = {DType.float32: jnp.float32, DType.bfloat16: jnp.bfloat16}


def dtype_of(name: DType | str):
    """JAX dtype of a config dtype (a ``DType`` or its string)."""
    return _DTYPES[DType(name)]


@dataclass
class Components:
    """Transformer, prompt encoder and VAE of one model, with the identity used in cache keys."""

    name: str
    config: WanTransformerConfig
    transformer: WanTransformer
    prompt_encoder: PromptEncoder
    vae: WanVAE
    identity: str
    tiling: TilingConfig | None

    def encode(self, prompts: list[str]) -> np.ndarray:
        """Prompts → float32 [B, L, text_dim] embeddings (disk-cached)."""
        return self.prompt_encoder.encode(prompts)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """[1, 16, F, H, W] latents → uint8 [T, H*8, W*8, 3] frames."""
        (frames,) = decode_to_frames(self.vae, jnp.asarray(latents), tiling=self.tiling)
        return frames


def _checkpoint(model: ModelConfig) -> WanCheckpoint:
    if not model.checkpoint:
        raise ValueError(
            f"model={model.name} needs its weights: set model.checkpoint=/path/to/"
            "Wan2.1-T2V-*-Diffusers (a diffusers-format folder), or use model=tiny"
        )
    return locate_checkpoint(model.checkpoint)


def transformer_config_for(model: ModelConfig) -> WanTransformerConfig:
    """The transformer architecture a run will use, without reading any weight.

    For a checkpoint, the folder is checked completely first (every missing part named), and its
    ``config.json`` must agree with the named preset.
    """
    if model.name == "tiny":
        if model.checkpoint:
            raise ValueError("model=tiny has seeded random weights; drop model.checkpoint")
        return get_transformer_config("tiny")
    preset = get_transformer_config(model.name)
    found = read_diffusers_config(_checkpoint(model).transformer, text_len=preset.text_len)
    differences = config_differences(preset, found)
    if differences:
        detail = ", ".join(f"{f}: preset {a!r} vs checkpoint {b!r}" for f, a, b in differences)
        raise ValueError(
            f"{model.checkpoint} is not a {model.name} checkpoint ({detail}); pick the matching "
            "model= preset"
        )
    return found


def _identity_of_folder(folder: Path) -> str:
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for f in sorted(folder.glob("*.safetensors")):
        digest.update(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def build_components(
    model: ModelConfig, dtype: DType | str, cache_dir: str | Path, mesh: Mesh | None = None
) -> Components:
    """Builds (tiny) or loads (checkpoint) the transformer, prompt encoder and VAE.

    Args:
        model: the model config group.
        dtype: compute dtype.
        cache_dir: root of the prompt-embedding cache.
        mesh: the sequence-parallel mesh, or None. The tiny model is replicated on it; a
            checkpoint's large matrices are sharded over it ("fsdp") as they are read.

    Returns:
        The model's parts and their identity.
    """
    dtypes = (dtype_of(model.param_dtype), dtype_of(dtype))
    prompts_cache = Path(cache_dir) / "prompts"
    if model.name == "tiny":
        return _tiny_components(model, dtypes, prompts_cache, mesh)
    return _checkpoint_components(model, dtypes, prompts_cache, mesh)


def _tiny_components(
    model: ModelConfig, dtypes: tuple, prompts_cache: Path, mesh: Mesh | None
) -> Components:
    """The ``tiny`` preset: seeded random weights, replicated on the mesh if there is one."""
    param_dtype, compute = dtypes
    cfg = get_transformer_config("tiny")
    # One compiled init program instead of an eager dispatch per parameter.
    transformer = nnx.jit(
        lambda: WanTransformer(
            cfg, rngs=nnx.Rngs(model.seed), param_dtype=param_dtype, dtype=compute
        )
    )()
    if mesh is not None:
        place_params(transformer, mesh, "replicated")
    return Components(
        name="tiny",
        config=cfg,
        transformer=transformer,
        prompt_encoder=tiny_prompt_encoder(
            model.seed, max_length=cfg.text_len, cache_dir=prompts_cache
        ),
        vae=tiny_vae(model.seed),
        identity=f"tiny|seed={model.seed}",
        tiling=None,
    )


def _checkpoint_components(
    model: ModelConfig, dtypes: tuple, prompts_cache: Path, mesh: Mesh | None
) -> Components:
    """A Wan preset read from its checkpoint folder, sharded onto the mesh as it is read."""
    param_dtype, compute = dtypes
    checkpoint = _checkpoint(model)
    cfg = transformer_config_for(model)
    log.info("loading %s from %s", model.name, checkpoint.root)
    shardings = None
    if mesh is not None:
        shardings = functools.partial(param_shardings, mesh=mesh, rule="fsdp")
    transformer = load_transformer(
        checkpoint.transformer,
        config=cfg,
        param_dtype=param_dtype,
        dtype=compute,
        shardings=shardings,
    )
    encoder = checkpoint_prompt_encoder(
        checkpoint, max_length=cfg.text_len, cache_dir=prompts_cache, param_dtype=param_dtype
    )
    return Components(
        name=model.name,
        config=cfg,
        transformer=transformer,
        prompt_encoder=encoder,
        vae=checkpoint_vae(checkpoint),
        identity=f"{model.name}|{_identity_of_folder(checkpoint.transformer)}",
        tiling=TilingConfig(),
    )
