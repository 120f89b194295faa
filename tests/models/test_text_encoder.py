"""UMT5 encoder: parity with transformers, sharded loading, prompt encoding and its disk cache."""

from __future__ import annotations

import logging

import jax.numpy as jnp
import numpy as np
import pytest

from models.prompt_encoder import PromptEncoder, prompt_cache_key
from models.safetensors_reader import WeightsError
from models.text_encoder import UMT5Config, load_umt5_encoder, relative_position_bucket
from models.tiny_components import TINY_UMT5_CONFIG, tiny_prompt_encoder, tiny_umt5_encoder
from models.tokenizer import ByteTokenizer, tokenize_batch
from tests.helpers.numerics import assert_allclose
from tests.helpers.references import ENCODER_PROMPTS, make_reference_encoder

PROMPTS = ENCODER_PROMPTS


@pytest.fixture(scope="module")
def reference_encoder(tmp_path_factory):
    """A random tiny transformers UMT5EncoderModel saved single-file and sharded."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model = make_reference_encoder()
    single = tmp_path_factory.mktemp("te_single")
    model.save_pretrained(single)
    sharded = tmp_path_factory.mktemp("te_sharded")
    model.save_pretrained(sharded, max_shard_size="20KB")
    return model, single, sharded


@pytest.mark.parity
def test_encoder_matches_transformers_on_a_padded_batch(reference_encoder):
    import torch

    model, single, sharded = reference_encoder
    batch = tokenize_batch(ByteTokenizer(), PROMPTS, max_length=64)
    assert batch.lengths[0] < 64 and batch.attention_mask[0, -1] == 0  # the first is padded
    with torch.no_grad():
        expected = model(
            torch.from_numpy(batch.input_ids).long(), torch.from_numpy(batch.attention_mask).long()
        ).last_hidden_state.numpy()
    assert (sharded / "model.safetensors.index.json").is_file()
    for folder in (single, sharded):
        encoder = load_umt5_encoder(folder)
        ours = encoder(jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))
        assert_allclose(ours, expected, atol=1e-4, err_msg=str(folder))


@pytest.mark.parity
def test_relative_position_buckets_match_transformers():
    pytest.importorskip("torch")
    import torch
    from transformers import UMT5Config as HFConfig
    from transformers.models.umt5.modeling_umt5 import UMT5Attention

    attn = UMT5Attention(
        HFConfig(relative_attention_num_buckets=32, relative_attention_max_distance=128),
        has_relative_attention_bias=True,
    )
    rel = np.arange(-300, 301)
    expected = attn._relative_position_bucket(torch.from_numpy(rel)).numpy()
    ours = np.asarray(relative_position_bucket(jnp.asarray(rel), 32, 128))
    np.testing.assert_array_equal(ours, expected)


def test_prompt_encoder_zeroes_padding_and_caches_on_disk(tmp_path, monkeypatch):
    encoder = tiny_prompt_encoder(0, max_length=32, cache_dir=tmp_path)
    first = encoder.encode(PROMPTS)
    assert first.shape == (2, 32, TINY_UMT5_CONFIG.d_model) and first.dtype == np.float32
    lengths = tokenize_batch(encoder.tokenizer, PROMPTS, 32).lengths
    assert lengths[0] < 32
    assert np.all(first[0, lengths[0] :] == 0) and np.all(
        np.abs(first[0, : lengths[0]]).sum(-1) > 0
    )
    assert len(list(tmp_path.glob("*.npy"))) == 2

    def fail(*_args, **_kwargs):
        raise AssertionError("a cached prompt was re-encoded")

    monkeypatch.setattr(encoder, "encode_uncached", fail)
    np.testing.assert_array_equal(encoder.encode(PROMPTS[::-1]), first[::-1])
    # A different length or encoder identity is a different key.
    assert prompt_cache_key(encoder.identity, PROMPTS[0], 32) != prompt_cache_key(
        encoder.identity, PROMPTS[0], 16
    )
    other_seed = tiny_prompt_encoder(1, max_length=32, cache_dir=tmp_path)
    assert other_seed.identity != encoder.identity
    assert not np.allclose(other_seed.encode(PROMPTS[:1]), first[:1])


def test_long_prompt_is_truncated_with_a_warning(caplog):
    encoder = tiny_prompt_encoder(0, max_length=16)
    with caplog.at_level(logging.WARNING, logger="models.tokenizer"):
        out = encoder.encode(["x" * 100])
    assert "truncated" in caplog.text
    assert out.shape == (1, 16, 64) and np.all(np.abs(out[0]).sum(-1) > 0)


def test_prompt_encoder_rejects_a_bare_string():
    with pytest.raises(ValueError, match="list of strings"):
        tiny_prompt_encoder(0).encode("a cat")


def test_config_and_loading_errors(tmp_path, reference_encoder):
    _, single, _ = reference_encoder
    with pytest.raises(ValueError, match="d_model"):
        UMT5Config.from_dict({"vocab_size": 10}, source="cfg")
    with pytest.raises(ValueError, match="dense_act_fn"):
        UMT5Config(
            vocab_size=4, d_model=4, d_kv=2, d_ff=4, num_layers=1, num_heads=2, dense_act_fn="swish"
        )
    with pytest.raises(WeightsError, match="does not exist"):
        load_umt5_encoder(tmp_path / "missing")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text((single / "config.json").read_text())
    (corrupt / "model.safetensors").write_bytes(b"\x00\x01 definitely not safetensors")
    with pytest.raises(WeightsError, match="not a readable safetensors"):
        load_umt5_encoder(corrupt)


def test_prompt_encoder_is_a_plain_dataclass_over_any_encoder_loader():
    encoder = tiny_prompt_encoder(0, max_length=8)
    again = PromptEncoder(
        encoder.tokenizer, lambda: tiny_umt5_encoder(0), TINY_UMT5_CONFIG, 8, encoder.identity
    )
    np.testing.assert_array_equal(again.encode(["abc"]), encoder.encode(["abc"]))
    assert again.dim == 64
