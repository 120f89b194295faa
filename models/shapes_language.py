"""The moving-shapes prompts read back into what they say, and said in part.

:func:`parse_prompt` inverts ``ClipSpec.prompt`` (and refuses anything else, naming the part it
could not read). :func:`partial_prompt` says a clip with some of its attributes left out, for
attribute dropout in training: a prompt that only sometimes names the colour, the shape, the
motion or the background makes each word carry its own meaning, rather than the whole sentence
naming one memorised clip (the model then draws combinations it never saw).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from models.shapes_data import (
    BACKGROUNDS,
    COLOURS,
    DIRECTION_WORDS,
    SHAPES,
    SPEEDS,
    UNNAMED_SHAPE,
    ClipSpec,
    MovingShape,
)

ATTRIBUTES = ("colour", "shape", "motion", "background")


def _alternatives(words: Collection[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_DIRECTION_OF = {words: name for name, words in DIRECTION_WORDS.items()}
_OBJECT = re.compile(
    rf"a (?P<colour>{_alternatives(COLOURS)}) (?P<shape>{_alternatives(SHAPES)}) moves "
    rf"(?P<speed>{_alternatives(SPEEDS)}) (?P<direction>{_alternatives(_DIRECTION_OF)})"
)
_PROMPT = re.compile(
    rf"(?P<objects>.+) on a (?P<background>{_alternatives(BACKGROUNDS)}) background"
)


def _object(phrase: str) -> MovingShape | None:
    match = _OBJECT.fullmatch(phrase)
    if match is None:
        return None
    direction = _DIRECTION_OF[match["direction"]]
    return MovingShape(match["shape"], match["colour"], direction, match["speed"])


def _object_phrases(text: str) -> list[MovingShape] | None:
    """One object phrase, or two joined by " and " (which direction words contain too)."""
    if (single := _object(text)) is not None:
        return [single]
    for split in re.finditer(" and ", text):
        first, second = _object(text[: split.start()]), _object(text[split.end() :])
        if first is not None and second is not None:
            return [first, second]
    return None


def parse_prompt(text: str) -> ClipSpec:
    """The clip a full prompt of the moving-shapes language describes.

    Raises:
        ValueError: the text is not such a prompt (the message names the part that is not).
    """
    whole = _PROMPT.fullmatch(text)
    if whole is None:
        raise ValueError(
            f"{text!r} is not a moving-shapes prompt: expected '<objects> on a <background> "
            f"background' with a background among {list(BACKGROUNDS)}"
        )
    objects = _object_phrases(whole["objects"])
    if objects is None:
        raise ValueError(
            f"{whole['objects']!r} in {text!r} is not one or two object phrases: expected 'a "
            "<colour> <shape> moves <speed> <direction>' (e.g. 'a red circle moves slowly to the "
            "left'), two joined by 'and'"
        )
    return ClipSpec(tuple(objects), whole["background"])


def partial_prompt(spec: ClipSpec, omit: Collection[str]) -> str:
    """``spec``'s prompt without the attributes in ``omit`` (a subset of :data:`ATTRIBUTES`).

    Omitting the shape says "shape" instead of its name; the colour and the motion are left out;
    the background's phrase is left out. Omitting everything leaves "a shape" per object.
    """
    unknown = set(omit) - set(ATTRIBUTES)
    if unknown:
        raise ValueError(f"omit={sorted(unknown)}: known attributes are {list(ATTRIBUTES)}")
    phrases = []
    for obj in spec.objects:
        words = ["a"]
        if "colour" not in omit:
            words.append(obj.colour)
        words.append(UNNAMED_SHAPE if "shape" in omit else obj.shape)
        if "motion" not in omit:
            words += ["moves", obj.speed, DIRECTION_WORDS[obj.direction]]
        phrases.append(" ".join(words))
    text = " and ".join(phrases)
    return text if "background" in omit else f"{text} on a {spec.background} background"
