"""The model parts a run needs, built from the ``model`` config group: seeded preset or checkpoint.

Both paths produce the same objects (``WanTransformer``, ``PromptEncoder``, ``WanVAE``), so the CPU
default exercises exactly the code a real ``Wan2.1-T2V-*-Diffusers`` folder takes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jax.sharding import Mesh

from evalharness.assembly.checkpoint_source import fetch_checkpoint, hub_snapshot
from evalharness.assembly.platform_choices import host_platform, scan_layers_for
from evalharness.config import DType, ModelConfig
from models.checkpoint import WanCheckpoint, checkpoint_prompt_encoder, checkpoint_vae
from models.config import (
    SEEDED_PRESETS,
    TINY_PRESETS,
    WanTransformerConfig,
    config_differences,
    get_transformer_config,
)
from models.dtypes import dtype_of
from models.loading import load_transformer, read_diffusers_config
from models.prompt_encoder import PromptEncoder
from models.random_weights import (
    random_identity,
    random_prompt_encoder,
    random_transformer,
    random_vae,
)
from models.sharding import param_shardings, place_params
from models.tiny_components import tiny_identity, tiny_prompt_encoder, tiny_transformer, tiny_vae
from models.transformer import WanTransformer
from models.vae import TilingConfig, WanVAE, decode_tiling
from models.vae_program import DecodeProgram

log = logging.getLogger(__name__)


@dataclass
class Components:
    """Transformer, prompt encoder and VAE of one model, with the identity used in cache keys.

    ``identity`` is :func:`models.tiny_components.tiny_identity` for a seeded preset
    (``tiny-planted|planted-v1|seed=<seed>``, ``tiny-random|seed=<seed>``: their weights follow
    from the name, the seed and the code, which the cache key hashes apart),
    :func:`models.random_weights.random_identity` on random weights
    (``wan2.1-t2v-1.3b|random-v1|seed=<seed>``) and :func:`checkpoint_identity` for a
    checkpoint (``tiny`` included).
    """

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

    decoder: DecodeProgram | None = None

    def prepare_decode(self, latent_shape: tuple[int, ...]) -> None:
        """Compiles the decode of ``[1, 16, F, H, W]`` latents once (the run's ``VAE compile``
        phase); a no-op when it is compiled for that shape already."""
        if self.decoder is None or self.decoder.latent_shape != tuple(latent_shape):
            self.decoder = DecodeProgram(self.vae, tuple(latent_shape), self.tiling)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """[1, 16, F, H, W] latents → uint8 [T, H*8, W*8, 3] frames, by the compiled decode
        (compiled here first when :meth:`prepare_decode` was not called for this shape)."""
        self.prepare_decode(tuple(latents.shape))
        (frames,) = self.decoder(latents)
        return frames


def transformer_config_for(model: ModelConfig) -> WanTransformerConfig:
    """The transformer architecture a run will use, without reading any weight.

    For a checkpoint folder, the folder is checked completely first (every missing part named);
    of a hub checkpoint only the configs are fetched (the weights come before the run starts,
    ``checkpoint_source.fetch_checkpoint``). The ``config.json`` must agree with the named preset.
    """
    if model.name in SEEDED_PRESETS and model.checkpoint:
        raise ValueError(
            f"model={model.name} has seeded weights (no checkpoint); drop model.checkpoint"
        )
    if model.seeded:  # drawn from model.seed at the preset's shapes: nothing is read
        return get_transformer_config(model.name)
    preset = get_transformer_config(model.name)
    snapshot = hub_snapshot(model, weights=False)
    folder = snapshot.folder / "transformer" if snapshot else fetch_checkpoint(model).transformer
    found = read_diffusers_config(folder, text_len=preset.text_len)
    differences = config_differences(preset, found)
    if differences:
        detail = ", ".join(f"{f}: preset {a!r} vs checkpoint {b!r}" for f, a, b in differences)
        raise ValueError(
            f"{model.checkpoint} is not a {model.name} checkpoint ({detail}); pick the matching "
            "model= preset"
        )
    return found


# The largest file identified by its full content (``file_identity``): hashing a 16 MB
# tokenizer.json takes milliseconds.
_FULL_HASH_BYTES = 64 << 20
_SAMPLE_BYTES = 1 << 20
# The parts of a checkpoint folder a run reads (``models.checkpoint.locate_checkpoint``).
CHECKPOINT_PARTS = ("transformer", "vae", "text_encoder", "tokenizer")


def _safetensors_header(path: Path, size: int) -> bytes | None:
    """The JSON header of a safetensors file (tensor names, dtypes, shapes, offsets), or None."""
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            return None
        length = int.from_bytes(prefix, "little")
        if length > size - 8 or length > _FULL_HASH_BYTES:
            return None
        return f.read(length)


def file_identity(path: Path) -> str:
    """A content-derived identity of one file that does not change when the file is copied.

    - ``*.safetensors``: its size, its JSON header (every tensor's name, dtype, shape and byte
      offsets) and the first and last MiB of its weights (so a fine-tune of the same shapes
      differs), never the whole file;
    - any other file up to 64 MiB (configs, safetensors indexes, tokenizer files): its content;
    - a larger file: its size and its first and last MiB.

    Names and modification times play no part (the caller adds the name).
    """
    size = path.stat().st_size
    digest = hashlib.sha256(f"size={size}".encode())
    header = _safetensors_header(path, size) if path.suffix == ".safetensors" else None
    if header is not None:
        digest.update(b"safetensors-header:" + header)
        _sample(path, 8 + len(header), size, digest)
    elif size <= _FULL_HASH_BYTES:
        digest.update(b"content:" + path.read_bytes())
    else:
        _sample(path, 0, size, digest)
    return digest.hexdigest()[:16]


def _sample(path: Path, start: int, size: int, digest) -> None:
    """Feeds the first and last MiB of ``path[start:size]`` (all of it when shorter) to ``digest``."""
    with path.open("rb") as f:
        f.seek(start)
        digest.update(b"head:" + f.read(_SAMPLE_BYTES))
        f.seek(max(start, size - _SAMPLE_BYTES))
        digest.update(b"tail:" + f.read(_SAMPLE_BYTES))


def folder_identity(folder: Path) -> str:
    """Identity of a checkpoint sub-folder: every file in it (recursively, hidden files and
    folders skipped), by relative path and :func:`file_identity`."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        digest.update(f"{relative.as_posix()}:{file_identity(path)}\n".encode())
    return digest.hexdigest()[:16]


def checkpoint_identities(checkpoint: WanCheckpoint) -> dict[str, str]:
    """``{part: folder identity}`` for every part of a checkpoint a run reads (transformer, VAE,
    text encoder, tokenizer)."""
    return {part: folder_identity(getattr(checkpoint, part)) for part in CHECKPOINT_PARTS}


def checkpoint_identity(name: str, checkpoint: WanCheckpoint) -> str:
    """The ``Components.identity`` of a checkpoint model: the preset name and every part's
    identity, readable (``wan2.1-t2v-1.3b|transformer=…|vae=…|text_encoder=…|tokenizer=…``).

    Content-derived (see :func:`file_identity`), so a copied or moved checkpoint keeps its identity,
    while any changed config, tokenizer file, weight layout (safetensors header) or sampled weight
    bytes give a new one.
    """
    parts = checkpoint_identities(checkpoint)
    return "|".join([name, *(f"{part}={value}" for part, value in parts.items())])


# A model's parts in the order of ``Components``' fields: config, transformer, encoder, VAE, identity.
_Parts = tuple[WanTransformerConfig, WanTransformer, PromptEncoder, WanVAE, str]


def build_components(
    model: ModelConfig, dtype: DType | str, cache_dir: str | Path, mesh: Mesh | None = None
) -> Components:
    """Builds (``tiny-planted``, ``tiny-random``, ``model.checkpoint=random``) or loads (a
    checkpoint: ``tiny``, a Wan folder) the transformer, prompt encoder and VAE.

    Args:
        model: the model config group.
        dtype: compute dtype.
        cache_dir: root of the prompt-embedding cache.
        mesh: the sequence-parallel mesh, or None. The tiny models are replicated on it; a
            Wan checkpoint's large matrices are sharded over it ("fsdp") as they are read.

    Returns:
        The model's parts and their identity.
    """
    dtypes = (dtype_of(model.param_dtype), dtype_of(dtype))
    prompts_cache = Path(cache_dir) / "prompts"
    build = _checkpoint_parts
    if model.seeded:
        build = _random_parts if model.random_weights else _seeded_parts
    cfg, transformer, encoder, vae, identity = build(model, dtypes, prompts_cache, mesh)
    return Components(
        model.name, cfg, transformer, encoder, vae, identity, decode_tiling(model.name)
    )


def _seeded_parts(
    model: ModelConfig, dtypes: tuple, prompts_cache: Path, mesh: Mesh | None
) -> _Parts:
    """A seeded preset (``tiny-planted``: planted heads; ``tiny-random``: plain random weights),
    replicated on the mesh if there is one: its config, transformer, encoder, VAE and identity."""
    param_dtype, compute = dtypes
    cfg = get_transformer_config(model.name)
    transformer = tiny_transformer(
        model.name,
        model.seed,
        param_dtype=param_dtype,
        dtype=compute,
        scan_layers=scan_layers_for(model.scan_layers, host_platform()),
    )
    if mesh is not None:
        place_params(transformer, mesh, "replicated")
    encoder = tiny_prompt_encoder(model.seed, max_length=cfg.text_len, cache_dir=prompts_cache)
    return cfg, transformer, encoder, tiny_vae(model.seed), tiny_identity(model.name, model.seed)


def _random_parts(
    model: ModelConfig, dtypes: tuple, prompts_cache: Path, mesh: Mesh | None
) -> _Parts:
    """A preset at its real shapes on weights drawn from ``model.seed`` (``models.random_weights``),
    placed on the mesh as a checkpoint's would be: its config, transformer, encoder, VAE and
    identity. Nothing is read or fetched."""
    param_dtype, compute = dtypes
    cfg = get_transformer_config(model.name)
    log.info(
        "drawing %s's weights at random (model.seed=%d): no checkpoint", model.name, model.seed
    )
    shardings = None
    if mesh is not None:
        rule = "replicated" if model.name in TINY_PRESETS else "fsdp"
        shardings = functools.partial(param_shardings, mesh=mesh, rule=rule)
    transformer = random_transformer(
        cfg,
        model.seed,
        param_dtype=param_dtype,
        dtype=compute,
        scan_layers=scan_layers_for(model.scan_layers, host_platform()),
        shardings=shardings,
    )
    encoder = random_prompt_encoder(
        cfg.text_dim, model.seed, max_length=cfg.text_len, cache_dir=prompts_cache
    )
    vae = random_vae(model.name, model.seed)
    return cfg, transformer, encoder, vae, random_identity(model.name, model.seed)


def _checkpoint_parts(
    model: ModelConfig, dtypes: tuple, prompts_cache: Path, mesh: Mesh | None
) -> _Parts:
    """A preset read from its checkpoint folder, placed on the mesh as it is read (a tiny model
    replicated, a Wan model sharded): its config, transformer, encoder, VAE and identity."""
    param_dtype, compute = dtypes
    checkpoint = fetch_checkpoint(model)
    cfg = transformer_config_for(model)
    log.info("loading %s from %s", model.name, checkpoint.root)
    shardings = None
    if mesh is not None:
        rule = "replicated" if model.name in TINY_PRESETS else "fsdp"
        shardings = functools.partial(param_shardings, mesh=mesh, rule=rule)
    transformer = load_transformer(
        checkpoint.transformer,
        config=cfg,
        param_dtype=param_dtype,
        dtype=compute,
        shardings=shardings,
        scan_layers=scan_layers_for(model.scan_layers, host_platform()),
    )
    encoder = checkpoint_prompt_encoder(
        checkpoint, max_length=cfg.text_len, cache_dir=prompts_cache, param_dtype=param_dtype
    )
    vae = checkpoint_vae(checkpoint)
    return cfg, transformer, encoder, vae, checkpoint_identity(model.name, checkpoint)
