"""The moving-shapes prompts parsed back and said in part (attribute dropout in training)."""

from __future__ import annotations

import numpy as np
import pytest

from models.shapes_data import (
    UNNAMED_SHAPE,
    ClipSpec,
    MovingShape,
    draw_clip,
    held_out_specs,
    prompt_words,
)
from models.shapes_language import ATTRIBUTES, parse_prompt, partial_prompt
from models.tokenizer import WordTokenizer

TWO = ClipSpec(
    (
        MovingShape("circle", "red", "up-right", "slowly"),
        MovingShape("square", "white", "left", "quickly"),
    ),
    "purple to black gradient",
)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_drawn_prompt_parses_back_to_its_clip(split):
    for seed in range(300):
        spec, _ = draw_clip(seed, split, two_shape_prob=0.5)
        assert parse_prompt(spec.prompt) == spec


def test_two_objects_whose_direction_words_hold_and():
    assert TWO.prompt.count(" and ") == 2
    assert parse_prompt(TWO.prompt) == TWO


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a red blob moves slowly up on a black background", "'a red blob moves slowly up'"),
        ("a red circle moves slowly up on a pink background", "not a moving-shapes prompt"),
        ("a red circle moves slowly up", "not a moving-shapes prompt"),
        ("", "not a moving-shapes prompt"),
    ],
)
def test_other_text_is_refused_naming_the_part(text, message):
    with pytest.raises(ValueError, match="") as err:
        parse_prompt(text)
    assert message in str(err.value)


def test_partial_prompts_leave_out_exactly_what_is_asked():
    spec = TWO
    assert partial_prompt(spec, ()) == spec.prompt
    assert partial_prompt(spec, ["colour"]) == (
        "a circle moves slowly diagonally up and to the right and a square moves quickly to the "
        "left on a purple to black gradient background"
    )
    assert partial_prompt(spec, ["shape", "background"]) == (
        "a red shape moves slowly diagonally up and to the right and a white shape moves quickly "
        "to the left"
    )
    assert partial_prompt(spec, ["motion"]).startswith("a red circle and a white square on a ")
    assert partial_prompt(spec, ATTRIBUTES) == "a shape and a shape"
    with pytest.raises(ValueError, match="known attributes"):
        partial_prompt(spec, ["size"])


def test_every_partial_prompt_is_in_the_trained_vocabulary():
    vocabulary = set(prompt_words())
    assert UNNAMED_SHAPE in vocabulary
    rng = np.random.default_rng(0)
    for spec in held_out_specs()[:20]:
        omit = [a for a in ATTRIBUTES if rng.random() < 0.5]
        assert set(WordTokenizer.PATTERN.findall(partial_prompt(spec, omit))) <= vocabulary
