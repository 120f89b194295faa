"""Tokenizers: sentencepiece and tokenizer.json paths against transformers' T5 tokenizer."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from models.tokenizer import (
    ByteTokenizer,
    SentencePieceTokenizer,
    TokenizerJsonTokenizer,
    WordTokenizer,
    clean_prompt,
    load_tokenizer,
    tokenize_batch,
)

CORPUS = [
    "A cat walks on the grass in the morning light.",
    "The quick brown fox jumps over the lazy dog.",
    "Slow motion video of waves crashing on rocks at sunset.",
    "A red car drives through a city street at night.",
    "Children play football in a park while birds fly overhead.",
]
PROMPTS = [
    "A cat walks on the  grass at sunset.",
    "Zebra!! quick fox, 123 über &amp; <b>x</b>\n end",
]


@pytest.fixture(scope="module")
def spm_folder(tmp_path_factory):
    """A tokenizer/ folder holding a sentencepiece model trained here with T5's special ids."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("tokenizer")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 20))
    sentencepiece.SentencePieceTrainer.Train(
        input=str(corpus),
        model_prefix=str(folder / "spiece"),
        vocab_size=60,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        minloglevel=2,
    )
    corpus.unlink()
    (folder / "spiece.vocab").unlink()
    return folder


@pytest.mark.parity
@pytest.mark.parametrize("max_length", [8, 40])
def test_sentencepiece_ids_match_transformers_t5_tokenizers(spm_folder, max_length):
    transformers = pytest.importorskip("transformers")
    cleaned = [clean_prompt(p) for p in PROMPTS]  # the Wan pipeline cleans before tokenizing
    ours = tokenize_batch(load_tokenizer(spm_folder), PROMPTS, max_length)
    assert isinstance(load_tokenizer(spm_folder), SentencePieceTokenizer)
    for cls in (transformers.T5Tokenizer, transformers.T5TokenizerFast):
        ref = cls.from_pretrained(spm_folder)(
            cleaned,
            padding="max_length",
            max_length=max_length,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
        )
        np.testing.assert_array_equal(
            ours.input_ids, np.array(ref["input_ids"]), err_msg=cls.__name__
        )
        np.testing.assert_array_equal(ours.attention_mask, np.array(ref["attention_mask"]))
    assert ours.input_ids.max() > 3  # real pieces, not all unknowns


@pytest.mark.parity
@pytest.mark.parametrize("slack", [1, 0, -1], ids=["one under", "at", "one over"])
def test_a_prompt_of_max_length_pieces_matches_transformers(spm_folder, caplog, slack):
    """A prompt whose pieces and ``</s>`` number exactly ``max_length`` (and one under, one
    over): nothing is cut at the limit, one piece is cut past it, as transformers does."""
    transformers = pytest.importorskip("transformers")
    prompt = " ".join(CORPUS[:2])
    fast = transformers.T5TokenizerFast.from_pretrained(spm_folder)
    with_eos = len(fast(prompt, add_special_tokens=True)["input_ids"])  # pieces + </s>
    max_length = with_eos + slack
    ours = tokenize_batch(load_tokenizer(spm_folder), [prompt], max_length)
    for cls in (transformers.T5Tokenizer, transformers.T5TokenizerFast):
        ref = cls.from_pretrained(spm_folder)(
            [prompt], padding="max_length", max_length=max_length, truncation=True
        )
        np.testing.assert_array_equal(ours.input_ids, ref["input_ids"], err_msg=cls.__name__)
        np.testing.assert_array_equal(ours.attention_mask, ref["attention_mask"])
    assert ours.input_ids.shape == (1, max_length)
    assert ours.lengths.tolist() == [min(with_eos, max_length)]
    assert ours.input_ids[0, ours.lengths[0] - 1] == 1  # </s> ends the real tokens
    assert ("truncated to max_length" in caplog.text) == (slack < 0)


@pytest.mark.parity
def test_tokenizer_json_path_matches_the_sentencepiece_path(spm_folder, tmp_path):
    transformers = pytest.importorskip("transformers")
    fast = transformers.T5TokenizerFast.from_pretrained(spm_folder)
    fast(PROMPTS, padding="max_length", max_length=12, truncation=True)  # leaves settings behind
    fast.save_pretrained(tmp_path)
    assert not (tmp_path / "spiece.model").exists()
    json_tok = load_tokenizer(tmp_path)
    assert isinstance(json_tok, TokenizerJsonTokenizer)
    ours = tokenize_batch(json_tok, PROMPTS, 40)
    spm = tokenize_batch(SentencePieceTokenizer(spm_folder / "spiece.model"), PROMPTS, 40)
    np.testing.assert_array_equal(ours.input_ids, spm.input_ids)


def test_padding_truncation_and_mask_with_the_byte_tokenizer(caplog):
    batch = tokenize_batch(ByteTokenizer(), ["ab", "abcdefgh"], max_length=5)
    assert batch.input_ids.tolist() == [[100, 101, 1, 0, 0], [100, 101, 102, 103, 1]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.lengths.tolist() == [3, 5]
    assert "truncated to max_length=5" in caplog.text


def test_clean_prompt_unescapes_html_and_collapses_whitespace():
    assert clean_prompt("  a &amp;amp; b\n\t c  ") == "a & b c"


def test_bad_tokenizer_inputs(tmp_path, spm_folder):
    with pytest.raises(ValueError, match="does not exist"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(ValueError, match="neither spiece.model nor tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a sentencepiece model"):
        load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="max_length=1"):
        tokenize_batch(ByteTokenizer(), ["a"], 1)
    with pytest.raises(ValueError, match="non-empty list"):
        tokenize_batch(ByteTokenizer(), "a", 4)
    copy = tmp_path / "copy"
    shutil.copytree(spm_folder, copy)
    assert (
        SentencePieceTokenizer(copy / "spiece.model").identity
        == load_tokenizer(spm_folder).identity
    )


def test_the_word_tokenizer_ids_unknown_words_and_refusals():
    words = WordTokenizer(["a", "red", "circle", ","])
    assert words.tokenize("A red,  CIRCLE dog") == [3, 4, 6, 5, words.unk_id]
    batch = tokenize_batch(words, ["a red circle"], max_length=6)
    np.testing.assert_array_equal(batch.input_ids[0], [3, 4, 5, words.eos_id, 0, 0])
    assert words.vocab_size == 7
    assert WordTokenizer(["a", "b"]).identity != WordTokenizer(["b", "a"]).identity
    for bad in ([], ["a", "a"], ["Red"], ["two words"], [""]):
        with pytest.raises(ValueError, match="word vocabulary"):
            WordTokenizer(bad)
