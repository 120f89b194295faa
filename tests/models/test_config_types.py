"""A transformer ``config.json`` whose integer holds a JSON ``true`` is refused for its type, naming
the field and the file, for every preset's config: ``bool`` is an ``int`` to Python (True == 1),
so a type check that forgets it lets ``"num_layers": true`` through as one layer, and the refusal
that follows blames the preset the user asked for instead of the file."""

from __future__ import annotations

import dataclasses
import json

import pytest

from models.config import WanTransformerConfig, get_transformer_config, transformer_config_names
from models.loading import load_transformer

# The integer arguments of diffusers' WanTransformer3DModel, which its config.json records.
INT_KEYS = (
    "num_attention_heads",
    "attention_head_dim",
    "in_channels",
    "out_channels",
    "text_dim",
    "freq_dim",
    "ffn_dim",
    "num_layers",
    "rope_max_seq_len",
)


def _diffusers_json(preset: str) -> dict:
    """The config.json diffusers writes for ``preset``'s architecture."""
    raw = dataclasses.asdict(get_transformer_config(preset))
    del raw["text_len"]  # a usage choice, not in the file
    return {"_class_name": "WanTransformer3DModel", **raw, "patch_size": list(raw["patch_size"])}


def _with_true(raw: dict, key: str) -> dict:
    """``raw`` with JSON true for ``key`` (``patch_size[1]`` for an entry of the patch)."""
    if key == "patch_size[1]":
        return {**raw, "patch_size": [raw["patch_size"][0], True, raw["patch_size"][2]]}
    return {**raw, key: True}


def test_the_int_keys_are_every_integer_field():
    ints = {f.name for f in dataclasses.fields(WanTransformerConfig) if f.type == "int"}
    assert ints - {"text_len"} == set(INT_KEYS)  # a new integer field is checked below too


@pytest.mark.parametrize("preset", transformer_config_names())
def test_json_true_for_an_integer_is_refused_for_its_type(preset):
    raw = _diffusers_json(preset)
    assert WanTransformerConfig.from_diffusers_json(raw, text_len=512) is not None
    wrong = {}
    for key in INT_KEYS:
        try:
            WanTransformerConfig.from_diffusers_json(_with_true(raw, key))
            wrong[key] = "accepted"
        except ValueError as err:
            if str(err) != f"{key}=True has type bool; it must be an integer":
                wrong[key] = str(err)
    assert not wrong, f"JSON true for an integer field: {wrong}"
    with pytest.raises(ValueError, match=r"^patch_size=\(1, True, 2\) .*must be three integers"):
        WanTransformerConfig.from_diffusers_json(_with_true(raw, "patch_size[1]"))


@pytest.mark.parametrize("preset", transformer_config_names())
def test_a_checkpoint_with_json_true_blames_the_file_not_the_preset(tmp_path, preset):
    """Loading with the preset named: the file's type is the error, before any comparison with
    the preset (which would say the preset "disagrees")."""
    raw = _diffusers_json(preset)
    expected = {key: f"{key}=True has type bool; it must be an integer" for key in INT_KEYS}
    expected["patch_size[1]"] = "patch_size=(1, True, 2) has type tuple; it must be three integers"
    for key, why in expected.items():
        (tmp_path / "config.json").write_text(json.dumps(_with_true(raw, key)))
        with pytest.raises(ValueError) as refused:
            load_transformer(tmp_path, config=preset)
        message = str(refused.value)
        assert message == f"{tmp_path / 'config.json'}: {why}", message
