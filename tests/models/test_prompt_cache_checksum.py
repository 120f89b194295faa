"""The prompt-embedding cache vouches for its entries: each ``.npy`` has its SHA-256 beside it,
and an entry that does not match (a flipped bit, a zeroed file), has no checksum or does not
read is set aside with one warning and the prompt encoded afresh: its values are never used."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from models.prompt_encoder import checksum_path, prompt_cache_key
from models.tiny_components import tiny_prompt_encoder

PROMPT = "a red fox"


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[-7] ^= 0x10  # a bit of the last float: the file still reads, with another value
    path.write_bytes(bytes(data))


def _zero(path):
    path.write_bytes(bytes(path.stat().st_size))


def _drop_checksum(path):
    checksum_path(path).unlink()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (_flip_a_bit, "does not match its checksum"),
        (_zero, "does not match its checksum"),
        (_drop_checksum, "has no checksum"),
    ],
)
def test_a_damaged_entry_is_set_aside_and_encoded_afresh(tmp_path, caplog, damage, why):
    encoder = tiny_prompt_encoder(0, max_length=32, cache_dir=tmp_path)
    good = encoder.encode([PROMPT])
    entry = tmp_path / f"{prompt_cache_key(encoder.identity, PROMPT, 32)}.npy"
    assert checksum_path(entry).is_file()
    damage(entry)
    loads = encoder.loads
    with caplog.at_level(logging.WARNING, logger="models.prompt_encoder"):
        again = encoder.encode([PROMPT])
    np.testing.assert_array_equal(again, good)  # the fresh encoding, not the damaged file's
    assert encoder.loads == loads + 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and why in warnings[0] and str(entry) in warnings[0]
    assert len(list(tmp_path.glob(".damaged-*.npy"))) == 1  # kept for inspection
    # The entry written afresh is whole: the next encode reads it.
    encoder.encode([PROMPT])
    assert encoder.loads == loads + 1


def test_a_whole_entry_is_read_without_encoding(tmp_path):
    encoder = tiny_prompt_encoder(0, max_length=32, cache_dir=tmp_path)
    first = encoder.encode([PROMPT])
    loads = encoder.loads
    np.testing.assert_array_equal(encoder.encode([PROMPT]), first)
    assert encoder.loads == loads
