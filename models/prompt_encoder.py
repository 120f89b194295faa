"""Prompts → text context ``[B, L, d_model]`` as the Wan pipeline builds it, cached on disk.

``PromptEncoder.encode`` tokenizes (pad/truncate to ``max_length``), runs the UMT5 encoder, and
zeroes every position past each prompt's length, as diffusers' ``WanPipeline._get_t5_prompt_embeds``
does (``u[:len]`` then zero padding). Each prompt's embedding is stored as one ``.npy`` under
``cache_dir`` keyed by sha256(encoder identity, max length, prompt), so a sweep encodes a prompt once.
Beside it, ``<key>.sha256`` holds the SHA-256 of the ``.npy`` written: an entry whose file does
not match it (a flipped bit, a zeroed file), has none, or does not read as the embedding's shape
is damaged; it is set aside (renamed ``.damaged-<key>-...``, kept for inspection) with one
warning, and the prompt is encoded afresh, never read from it.

The encoder is not held: UMT5-XXL is ~10.6 GiB in bfloat16, as much as the 14B transformer's
activations may need. ``PromptEncoder`` keeps a *loader* and calls it only when some prompt misses
the cache; the weights are deleted right after the encoding (or at the end of a :meth:`session`), so
the encoder never shares the device with the denoising loop. ``device`` may put it on the host CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.text_encoder import UMT5Config, UMT5Encoder, run_encoder
from models.tokenizer import Tokenizer, tokenize_batch

log = logging.getLogger(__name__)

EncoderLoader = Callable[[], UMT5Encoder]
CHECKSUM_SUFFIX = ".sha256"


def prompt_cache_key(identity: str, prompt: str, max_length: int) -> str:
    """Hex sha256 of ``(encoder identity, max_length, prompt)``; the cache file stem."""
    payload = f"{identity}\x00{max_length}\x00{prompt}".encode()
    return hashlib.sha256(payload).hexdigest()


def release_encoder(encoder: UMT5Encoder) -> None:
    """Deletes every array of ``encoder`` so its memory is freed even if a reference survives."""
    for leaf in jax.tree.leaves(nnx.state(encoder)):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()


@dataclasses.dataclass
class PromptEncoder:
    """Tokenizer + UMT5 encoder loader + text length + optional disk cache.

    Attributes:
        tokenizer: any :class:`models.tokenizer.Tokenizer`.
        loader: returns a freshly loaded (or built) UMT5 encoder on each call; called only when a
            prompt misses the cache. Its arrays are deleted after use, so it must not hand out an
            encoder someone else keeps using.
        config: the encoder's config (``dim`` reads ``d_model`` from it without loading anything).
        max_length: L (512 for Wan 2.1; the tiny preset uses its transformer's ``text_len``).
        identity: what makes embeddings differ besides the prompt (weights, tokenizer, dtype);
            part of the cache key.
        cache_dir: where embeddings are cached; ``None`` disables the cache.
        device: where the encoder is loaded and run (e.g. ``jax.devices("cpu")[0]`` to keep it off
            the accelerator); ``None`` is JAX's default device.
        encoder: the loaded encoder while encoding (or inside a :meth:`session`), else ``None``.
        loads: how many times ``loader`` was called (for logs and tests).
    """

    tokenizer: Tokenizer
    loader: EncoderLoader
    config: UMT5Config
    max_length: int
    identity: str
    cache_dir: Path | None = None
    device: jax.Device | None = None
    encoder: UMT5Encoder | None = dataclasses.field(default=None, init=False, repr=False)
    loads: int = dataclasses.field(default=0, init=False)
    _holding: bool = dataclasses.field(default=False, init=False, repr=False)

    @property
    def dim(self) -> int:
        """d_model, the transformer's ``text_dim`` (from the config: nothing is loaded)."""
        return self.config.d_model

    def _placement(self) -> contextlib.AbstractContextManager:
        # Arrays created (weights read, inputs converted) and programs run inside go to `device`.
        return (
            jax.default_device(self.device) if self.device is not None else contextlib.nullcontext()
        )

    def _acquire(self) -> UMT5Encoder:
        if self.encoder is None:
            start = time.perf_counter()
            with self._placement():
                self.encoder = self.loader()
            self.loads += 1
            log.info("text encoder loaded in %.1f s", time.perf_counter() - start)
        return self.encoder

    def release(self) -> None:
        """Deletes the loaded encoder's arrays and drops it (no-op when none is loaded)."""
        if self.encoder is not None:
            release_encoder(self.encoder)
            self.encoder = None
            log.info("text encoder released")

    @contextlib.contextmanager
    def session(self) -> Iterator[PromptEncoder]:
        """Keeps the encoder (once a miss loads it) across several :meth:`encode` calls.

        Use it to encode e.g. a prompt and a negative prompt with one load; the encoder is released
        on exit, also on an exception.
        """
        outer = self._holding
        self._holding = True
        try:
            yield self
        finally:
            self._holding = outer
            if not outer:
                self.release()

    def encode_uncached(self, prompts: Sequence[str]) -> np.ndarray:
        """Encodes without touching the cache, loading the encoder and releasing it afterwards.

        Args:
            prompts: B prompt strings.

        Returns:
            ``[B, max_length, d_model]`` float32, zero past each prompt's token count.
        """
        batch = tokenize_batch(self.tokenizer, prompts, self.max_length)
        try:
            encoder = self._acquire()
            with self._placement():
                mask = jnp.asarray(batch.attention_mask)
                hidden = run_encoder(encoder, jnp.asarray(batch.input_ids), mask)
                hidden = hidden.astype(jnp.float32) * mask[..., None]
                out = np.asarray(hidden)
            del encoder, hidden
        finally:
            if not self._holding:
                self.release()
        return out

    def encode(self, prompts: Sequence[str]) -> np.ndarray:
        """Encodes prompts, reading and filling the disk cache when ``cache_dir`` is set.

        The encoder is loaded only if some prompt misses the cache.

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


def checksum_path(path: Path) -> Path:
    """The file holding the SHA-256 of the cached embedding ``path`` (``<key>.sha256``)."""
    return path.with_suffix(CHECKSUM_SUFFIX)


def _digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def cache_damage(path: Path, shape: tuple[int, int]) -> str | None:
    """What is wrong with the cached embedding ``path`` (module docstring), or None when it
    matches its checksum and reads as float32 ``shape``."""
    try:
        recorded = checksum_path(path).read_text().strip()
    except FileNotFoundError:
        return f"it has no checksum ({checksum_path(path).name})"
    except OSError as err:
        return f"its checksum is unreadable ({err})"
    try:
        if _digest(path) != recorded:
            return "it does not match its checksum"
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        return f"it is unreadable ({err})"
    if arr.shape != shape or arr.dtype != np.float32:
        return f"it holds {arr.dtype} {arr.shape}, not float32 {shape}"
    return None


def _read_cached(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached embedding ``[max_length, d_model]``, or None when absent or damaged
    (:func:`cache_damage`: then set aside with one warning and encoded afresh)."""
    if not path.is_file():
        return None
    problem = cache_damage(path, shape)
    if problem is None:
        return np.load(path, allow_pickle=False)
    aside = path.with_name(f".damaged-{path.stem}-{os.getpid()}-{time.monotonic_ns()}.npy")
    try:
        os.rename(path, aside)
        checksum_path(path).unlink(missing_ok=True)
        where = f"set aside as {aside}"
    except FileNotFoundError:
        return None  # set aside by another process meanwhile
    except OSError as err:
        where = f"it cannot be set aside ({err}): delete {path}"
    log.warning(
        f"prompt embedding cache entry {path} is damaged ({problem}); {where}; encoding afresh"
    )
    return None


def _write_atomic(path: Path, array: np.ndarray) -> None:
    """Writes the embedding and its checksum (the checksum first: a reader in between sees an
    entry whose file does not match yet, and encodes afresh), each by write-then-rename, so a
    concurrent reader never sees a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array.astype(np.float32), allow_pickle=False)
        _replace_text(checksum_path(path), _digest(Path(tmp)))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _replace_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=f"{CHECKSUM_SUFFIX}.tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
