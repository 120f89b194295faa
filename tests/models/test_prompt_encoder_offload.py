"""The text encoder is loaded only on a cache miss and freed right after encoding."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models.prompt_encoder as prompt_encoder_module
from models.text_encoder import UMT5Encoder
from models.tiny_components import TINY_UMT5_CONFIG, tiny_prompt_encoder, tiny_umt5_encoder
from models.tokenizer import tokenize_batch

PROMPTS = ["A cat walks on grass.", "Waves crash on the rocks at sunset, slow motion, 4k"]
MAX_LENGTH = 32


class TrackingLoader:
    """Builds the tiny UMT5 (seed 0) and remembers each encoder weakly and its arrays strongly.

    Holding the arrays (not the module) lets a test see that they were deleted, while the weak
    reference shows the module itself was let go.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.modules: list[weakref.ref] = []
        self.arrays: list[jax.Array] = []
        self.devices: set = set()

    def __call__(self) -> UMT5Encoder:
        self.calls += 1
        encoder = tiny_umt5_encoder(0)
        self.modules.append(weakref.ref(encoder))
        arrays = jax.tree.leaves(nnx.state(encoder))
        self.arrays.extend(arrays)
        self.devices |= {d for a in arrays for d in a.devices()}
        return encoder


def _tracked(cache_dir=None, **kwargs):
    encoder = tiny_prompt_encoder(0, max_length=MAX_LENGTH, cache_dir=cache_dir, **kwargs)
    loader = TrackingLoader()
    encoder.loader = loader
    return encoder, loader


def _assert_released(encoder, loader) -> None:
    assert encoder.encoder is None
    gc.collect()
    assert all(ref() is None for ref in loader.modules), "the encoder module is still referenced"
    assert loader.arrays and all(a.is_deleted() for a in loader.arrays), "weights not deleted"


@nnx.jit
def _held_run(encoder: UMT5Encoder, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    return encoder(input_ids, attention_mask)


def _direct_embeddings(prompts) -> np.ndarray:
    """What the prompt encoder computed when it held the encoder for the whole run (nnx.jit)."""
    batch = tokenize_batch(tiny_prompt_encoder(0).tokenizer, prompts, MAX_LENGTH)
    mask = jnp.asarray(batch.attention_mask)
    hidden = _held_run(tiny_umt5_encoder(0), jnp.asarray(batch.input_ids), mask)
    return np.asarray(hidden.astype(jnp.float32) * mask[..., None])


def test_building_the_prompt_encoder_loads_nothing():
    encoder, loader = _tracked()
    assert encoder.dim == TINY_UMT5_CONFIG.d_model == 64
    assert loader.calls == 0 and encoder.encoder is None and encoder.loads == 0


def test_a_miss_loads_once_encodes_and_releases(tmp_path):
    encoder, loader = _tracked(tmp_path)
    out = encoder.encode(PROMPTS)  # two misses, one load
    assert loader.calls == 1 and encoder.loads == 1
    _assert_released(encoder, loader)
    np.testing.assert_array_equal(out, _direct_embeddings(PROMPTS))


def test_a_cache_hit_never_calls_the_loader(tmp_path):
    first, _ = _tracked(tmp_path)
    expected = first.encode(PROMPTS)

    def refuse():
        raise AssertionError("the loader was called although every prompt was cached")

    again = tiny_prompt_encoder(0, max_length=MAX_LENGTH, cache_dir=tmp_path)
    again.loader = refuse
    np.testing.assert_array_equal(again.encode(PROMPTS[::-1]), expected[::-1])
    assert again.loads == 0


def test_without_a_cache_every_call_loads_and_releases():
    encoder, loader = _tracked()
    first = encoder.encode(PROMPTS[:1])
    second = encoder.encode(PROMPTS[:1])
    assert loader.calls == 2
    _assert_released(encoder, loader)
    np.testing.assert_array_equal(first, second)  # the seeded rebuild gives the same weights
    np.testing.assert_array_equal(first, _direct_embeddings(PROMPTS[:1]))


def test_a_session_loads_once_for_several_calls(tmp_path):
    encoder, loader = _tracked(tmp_path)
    with encoder.session():
        positive = encoder.encode(PROMPTS[:1])
        assert encoder.encoder is not None  # kept for the next call
        negative = encoder.encode(PROMPTS[1:])
        with encoder.session():  # nested sessions do not release early
            encoder.encode(["another prompt"])
        assert encoder.encoder is not None
    assert loader.calls == 1
    _assert_released(encoder, loader)
    # Same batches as the direct runs: XLA may round differently for another batch size.
    np.testing.assert_array_equal(positive, _direct_embeddings(PROMPTS[:1]))
    np.testing.assert_array_equal(negative, _direct_embeddings(PROMPTS[1:]))


def test_a_session_with_only_hits_loads_nothing(tmp_path):
    tiny_prompt_encoder(0, max_length=MAX_LENGTH, cache_dir=tmp_path).encode(PROMPTS)
    encoder, loader = _tracked(tmp_path)
    with encoder.session():
        encoder.encode(PROMPTS)
    assert loader.calls == 0


def test_a_failed_encoding_still_releases(monkeypatch):
    encoder, loader = _tracked()

    def broken(*_args, **_kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(prompt_encoder_module, "run_encoder", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        encoder.encode(PROMPTS)
    _assert_released(encoder, loader)


def test_the_encoder_can_run_on_the_host_cpu():
    cpu = jax.devices("cpu")[0]
    encoder, loader = _tracked(device=cpu)
    out = encoder.encode(PROMPTS)
    assert loader.devices == {cpu}
    _assert_released(encoder, loader)
    np.testing.assert_array_equal(out, _direct_embeddings(PROMPTS))
