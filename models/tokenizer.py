"""Prompt tokenizers: the checkpoint's sentencepiece/tokenizer.json, and a tiny file-free one.

All tokenizers share :func:`tokenize_batch`, which does what the Wan pipeline asks of the T5 tokenizer
(``padding="max_length", truncation=True, add_special_tokens=True``): clean the prompt, tokenize,
keep at most ``max_length - 1`` tokens and append ``</s>``, pad with the pad id, and return the
attention mask. Truncation warns, as transformers does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)


class Tokenizer(Protocol):
    """What the prompt encoder needs from a tokenizer."""

    pad_id: int
    eos_id: int
    identity: str  # stable description of the vocabulary, part of the prompt-cache key

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` without the trailing ``</s>``."""
        ...


class SentencePieceTokenizer:
    """T5-style tokenizer over a sentencepiece ``spiece.model`` (the ``sentencepiece`` package)."""

    def __init__(self, model_file: str | Path):
        import sentencepiece

        path = Path(model_file)
        if not path.is_file():
            raise ValueError(f"sentencepiece model {path} does not exist")
        self._sp = sentencepiece.SentencePieceProcessor()
        try:
            self._sp.Load(str(path))
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{path} is not a sentencepiece model ({e})") from e
        # Models trained without explicit special ids may still hold the T5 pieces by name.
        self.pad_id = self._special_id(self._sp.pad_id(), "<pad>")
        self.eos_id = self._special_id(self._sp.eos_id(), "</s>")
        if self.pad_id < 0 or self.eos_id < 0:
            raise ValueError(
                f"{path} defines pad_id={self.pad_id}, eos_id={self.eos_id}; a T5 tokenizer needs both "
                "(UMT5 uses pad 0, eos 1)"
            )
        self.identity = "spm:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]

    def _special_id(self, declared: int, piece: str) -> int:
        if declared >= 0:
            return int(declared)
        found = int(self._sp.PieceToId(piece))
        return found if found != self._sp.unk_id() else -1

    def tokenize(self, text: str) -> list[int]:
        """Sentencepiece ids of ``text`` (no special tokens)."""
        return list(self._sp.EncodeAsIds(text))


class TokenizerJsonTokenizer:
    """A ``tokenizer.json`` (T5TokenizerFast layout) through the ``tokenizers`` package.

    Used when a checkpoint ships no ``spiece.model``, as the shipped ``tiny`` model does;
    ``tokenizers`` is a core dependency.
    """

    def __init__(self, json_file: str | Path, *, pad_token: str = "<pad>", eos_token: str = "</s>"):
        path = Path(json_file)
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError as e:
            raise ValueError(
                f"{path.parent} has only tokenizer.json, which needs the `tokenizers` package "
                "(pip install tokenizers), or add spiece.model to use sentencepiece"
            ) from e
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as e:
            raise ValueError(f"{path} is not a readable tokenizer.json ({e})") from e
        # A saved tokenizer.json may carry padding/truncation settings; tokenize_batch does both.
        self._tok.no_padding()
        self._tok.no_truncation()
        pad, eos = self._tok.token_to_id(pad_token), self._tok.token_to_id(eos_token)
        if pad is None or eos is None:
            raise ValueError(f"{path} lacks the tokens {pad_token!r}/{eos_token!r}")
        self.pad_id, self.eos_id = int(pad), int(eos)
        self.identity = "tokjson:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]

    def tokenize(self, text: str) -> list[int]:
        """Ids of ``text`` without the post-processor's ``</s>`` (added by :func:`tokenize_batch`)."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)


class ByteTokenizer:
    """Deterministic file-free tokenizer for the tiny preset: UTF-8 bytes shifted past 3 specials.

    Ids: 0 pad, 1 ``</s>``, 2 unused (unk), ``3 + byte``; vocabulary 259.
    """

    VOCAB_SIZE = 259
    pad_id = 0
    eos_id = 1
    identity = "bytes-v1"

    def tokenize(self, text: str) -> list[int]:
        """``[3 + b for b in text.encode('utf-8')]``."""
        return [3 + b for b in text.encode("utf-8")]


class WordTokenizer:
    """Deterministic file-free word-level tokenizer over a fixed vocabulary.

    Lower-cases the text and splits it into words and punctuation runs (``\\w+|[^\\w\\s]+``, the
    ``tokenizers`` library's ``Whitespace`` pre-tokenizer). Ids: 0 pad, 1 ``</s>``, 2 unknown word,
    ``3 + i`` for the i-th vocabulary word. A model trained on a small language (the moving-shapes
    prompts) learns its conditioning far faster from whole words than from bytes: each word is one
    embedding the cross-attention can pick, rather than a spelling the encoder must first assemble.
    """

    pad_id = 0
    eos_id = 1
    unk_id = 2
    PATTERN = re.compile(r"\w+|[^\w\s]+")

    def __init__(self, words: Sequence[str]):
        words = tuple(words)
        bad = [w for w in words if not w or w != w.lower() or self.PATTERN.fullmatch(w) is None]
        if not words or bad or len(set(words)) != len(words):
            raise ValueError(
                f"a word vocabulary needs distinct lower-case words or punctuation runs; got "
                f"{len(words)} entries, invalid: {bad[:5]}"
            )
        self.words = words
        self._ids = {w: 3 + i for i, w in enumerate(words)}
        self.vocab_size = 3 + len(words)
        self.identity = "words:" + hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]

    def split(self, text: str) -> list[str]:
        """The lower-cased words and punctuation runs of ``text``."""
        return self.PATTERN.findall(text.lower())

    def tokenize(self, text: str) -> list[int]:
        """Word ids of ``text`` (unknown words → 2), without the trailing ``</s>``."""
        return [self._ids.get(w, self.unk_id) for w in self.split(text)]


def load_tokenizer(folder: str | Path) -> SentencePieceTokenizer | TokenizerJsonTokenizer:
    """The tokenizer of a checkpoint's ``tokenizer/`` folder (``spiece.model`` preferred).

    Raises:
        ValueError: the folder is missing, or holds neither ``spiece.model`` nor ``tokenizer.json``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"Tokenizer folder {folder} does not exist")
    if (folder / "spiece.model").is_file():
        return SentencePieceTokenizer(folder / "spiece.model")
    if (folder / "tokenizer.json").is_file():
        return TokenizerJsonTokenizer(folder / "tokenizer.json")
    raise ValueError(f"Tokenizer folder {folder} has neither spiece.model nor tokenizer.json")


def clean_prompt(text: str) -> str:
    """The Wan pipeline's ``prompt_clean``: HTML-unescape twice, collapse whitespace, strip.

    (The reference also runs ``ftfy.fix_text`` when ftfy is installed; it is not a dependency here,
    and it changes only mis-encoded text.)
    """
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


@dataclasses.dataclass(frozen=True)
class TokenBatch:
    """A padded batch of token ids.

    Attributes:
        input_ids: ``[B, L]`` int32.
        attention_mask: ``[B, L]`` int32, 1 on real tokens (including ``</s>``).
        lengths: ``[B]`` int32 real-token counts.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    lengths: np.ndarray


def tokenize_batch(tokenizer: Tokenizer, prompts: Sequence[str], max_length: int) -> TokenBatch:
    """Cleans, tokenizes, truncates (with a warning), appends ``</s>`` and pads to ``max_length``.

    Args:
        tokenizer: any :class:`Tokenizer`.
        prompts: B prompt strings.
        max_length: L (512 for Wan 2.1).

    Returns:
        :class:`TokenBatch` with ``[B, L]`` arrays.

    Raises:
        ValueError: ``max_length < 2``, an empty batch, or a prompt that is not a string.
    """
    if max_length < 2:
        raise ValueError(f"max_length={max_length}: need at least 2 (one token and </s>)")
    if isinstance(prompts, str) or len(prompts) == 0:
        raise ValueError(f"prompts must be a non-empty list of strings, got {prompts!r}")
    ids = np.full((len(prompts), max_length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(prompts), max_length), np.int32)
    lengths = np.zeros((len(prompts),), np.int32)
    for row, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise ValueError(f"prompt {row} is {type(prompt).__name__}, expected str")
        tokens = tokenizer.tokenize(clean_prompt(prompt))
        if len(tokens) > max_length - 1:
            logger.warning(
                "Prompt %d has %d tokens; truncated to max_length=%d (including </s>): %r",
                row,
                len(tokens) + 1,
                max_length,
                prompt[:80],
            )
            tokens = tokens[: max_length - 1]
        tokens = [*tokens, tokenizer.eos_id]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
        lengths[row] = len(tokens)
    return TokenBatch(ids, mask, lengths)
