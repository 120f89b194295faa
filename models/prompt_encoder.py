"""Prompts → text context ``[B, L, d_model]`` as the Wan pipeline builds it, cached on disk.

``PromptEncoder.encode`` tokenizes (pad/truncate to ``max_length``), runs the UMT5 encoder, and
zeroes every position past each prompt's length, as diffusers' ``WanPipeline._get_t5_prompt_embeds``
does (``u[:len]`` then zero padding). Each prompt's embedding is stored as one ``.npy`` under
``cache_dir`` keyed by sha256(encoder identity, max length, prompt), so a sweep encodes a prompt once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from models.text_encoder import UMT5Encoder, run_encoder
from models.tokenizer import Tokenizer, tokenize_batch


def prompt_cache_key(identity: str, prompt: str, max_length: int) -> str:
    """Hex sha256 of ``(encoder identity, max_length, prompt)``; the cache file stem."""
    payload = f"{identity}\x00{max_length}\x00{prompt}".encode()
    return hashlib.sha256(payload).hexdigest()


@dataclasses.dataclass
class PromptEncoder:
    """Tokenizer + UMT5 encoder + text length + optional disk cache.

    Attributes:
        tokenizer: any :class:`models.tokenizer.Tokenizer`.
        encoder: the UMT5 encoder.
        max_length: L (512 for Wan 2.1; the tiny preset uses its transformer's ``text_len``).
        identity: what makes embeddings differ besides the prompt (weights, tokenizer, dtype);
            part of the cache key.
        cache_dir: where embeddings are cached; ``None`` disables the cache.
    """

    tokenizer: Tokenizer
    encoder: UMT5Encoder
    max_length: int
    identity: str
    cache_dir: Path | None = None

    @property
    def dim(self) -> int:
        """d_model, the transformer's ``text_dim``."""
        return self.encoder.config.d_model

    def encode_uncached(self, prompts: Sequence[str]) -> np.ndarray:
        """Encodes without touching the cache.

        Args:
            prompts: B prompt strings.

        Returns:
            ``[B, max_length, d_model]`` float32, zero past each prompt's token count.
        """
        batch = tokenize_batch(self.tokenizer, prompts, self.max_length)
        hidden = run_encoder(
            self.encoder, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask)
        )
        hidden = hidden.astype(jnp.float32) * jnp.asarray(batch.attention_mask)[..., None]
        return np.asarray(hidden)

    def encode(self, prompts: Sequence[str]) -> np.ndarray:
        """Encodes prompts, reading and filling the disk cache when ``cache_dir`` is set.

        Args:
            prompts: B prompt strings.

        Returns:
            ``[B, max_length, d_model]`` float32 context, zero past each prompt's length.
        """
        if isinstance(prompts, str):
            raise ValueError(f"prompts must be a list of strings, got the string {prompts!r}")
        if self.cache_dir is None:
            return self.encode_uncached(prompts)
        cache = Path(self.cache_dir)
        cache.mkdir(parents=True, exist_ok=True)
        shape = (self.max_length, self.dim)
        out: list[np.ndarray | None] = []
        for prompt in prompts:
            path = cache / f"{prompt_cache_key(self.identity, prompt, self.max_length)}.npy"
            cached = _read_cached(path, shape)
            out.append(cached)
        todo = [i for i, x in enumerate(out) if x is None]
        if todo:
            fresh = self.encode_uncached([prompts[i] for i in todo])
            for i, emb in zip(todo, fresh, strict=True):
                key = prompt_cache_key(self.identity, prompts[i], self.max_length)
                _write_atomic(cache / f"{key}.npy", emb)
                out[i] = emb
        return np.stack(out)


def _read_cached(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached embedding, or None when absent or unreadable/wrong-shaped (then re-encoded)."""
    if not path.is_file():
        return None
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if arr.shape != shape or arr.dtype != np.float32:
        return None
    return arr


def _write_atomic(path: Path, array: np.ndarray) -> None:
    # Write-then-rename so a concurrent reader never sees a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array.astype(np.float32), allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
