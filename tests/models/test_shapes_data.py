"""Moving-shapes clips: prompts that say everything, determinism, the held-out split, the detector
reading colour and motion back from the generator's own clips."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from models.shapes_data import (
    BACKGROUNDS,
    COLOURS,
    DIRECTIONS,
    SHAPES,
    SPEEDS,
    UNNAMED_SHAPE,
    ClipSpec,
    MovingShape,
    draw_clip,
    held_out_specs,
    is_held_out,
    make_clip,
    object_tracks,
    prompt_words,
    render_clip,
    sample_spec,
)
from models.shapes_detector import colour_labels, detect, track_motion
from models.tokenizer import WordTokenizer
from models.training.settings import TrainSettings
from tests.helpers.paths import REPO_ROOT

# Half the CPU preset's size in space and time: the detector's verdicts do not depend on it.
SMALL = (17, 96, 160)


def test_the_prompt_says_shape_colour_motion_and_background():
    spec = ClipSpec((MovingShape("circle", "red", "left", "slowly"),), "dark blue")
    assert spec.prompt == "a red circle moves slowly to the left on a dark blue background"
    two = ClipSpec(
        (
            MovingShape("square", "green", "up-right", "quickly"),
            MovingShape("triangle", "white", "down", "slowly"),
        ),
        "purple to black gradient",
    )
    assert two.prompt == (
        "a green square moves quickly diagonally up and to the right and a white triangle moves "
        "slowly down on a purple to black gradient background"
    )


def test_the_vocabulary_is_as_wide_as_asked():
    assert {"circle", "square", "triangle"} <= set(SHAPES)
    assert len(COLOURS) >= 5 and len(BACKGROUNDS) >= 3 and len(SPEEDS) == 2
    assert {"left", "right", "up", "down"} <= set(DIRECTIONS) and len(DIRECTIONS) >= 6
    with pytest.raises(ValueError, match="colour='mauve'; known"):
        MovingShape("circle", "mauve", "left", "slowly")


def test_prompt_words_hold_every_word_of_every_prompt_and_no_other():
    rng = np.random.default_rng(0)
    specs = held_out_specs() + [sample_spec(rng, "train", 1.0) for _ in range(200)]
    used = {w for spec in specs for w in WordTokenizer.PATTERN.findall(spec.prompt)}
    # Partial prompts (attribute dropout) name an unnamed shape "shape".
    assert used | {UNNAMED_SHAPE} == set(prompt_words())
    assert list(prompt_words()) == sorted(prompt_words())


def test_clips_are_deterministic_uint8_at_the_cpu_preset_size():
    cpu = yaml.safe_load((REPO_ROOT / "conf" / "resolution" / "cpu.yaml").read_text())
    size = (cpu["frames"], cpu["height"], cpu["width"])
    assert (TrainSettings().frames, TrainSettings().height, TrainSettings().width) == size
    spec, frames = make_clip(7, "train", *size)
    again = make_clip(7, "train", *size)[1]
    assert frames.dtype == np.uint8 and frames.shape == (*size, 3)
    assert np.array_equal(frames, again)
    assert not np.array_equal(frames, make_clip(8, "train", *size)[1])
    assert not np.array_equal(frames[0], frames[-1])  # something moves


def test_training_never_draws_a_held_out_combination():
    held = held_out_specs()
    assert len(held) >= 24 and all(is_held_out(s.objects[0], s.background) for s in held)
    rng = np.random.default_rng(0)
    drawn = [sample_spec(rng, "train", two_shape_prob=0.5) for _ in range(2000)]
    assert not any(is_held_out(o, s.background) for s in drawn for o in s.objects)
    assert any(len(s.objects) == 2 for s in drawn)
    held_prompts = {s.prompt for s in held}
    assert not held_prompts & {s.prompt for s in drawn}
    # Every value on its own still appears in training.
    seen = {(o.shape, o.colour, o.direction, o.speed) for s in drawn for o in s.objects}
    for index, values in enumerate((SHAPES, COLOURS, DIRECTIONS, SPEEDS)):
        assert {v[index] for v in seen} == set(values)
    assert {s.background for s in drawn} == set(BACKGROUNDS)
    assert sample_spec(np.random.default_rng(1), "heldout") in held


def test_the_detector_reads_colour_and_direction_of_generated_clips():
    hits, straight = 0, []
    clips = 40
    for seed in range(clips):
        spec, frames = make_clip(seed, "train", *SMALL, two_shape_prob=0.0)
        found = detect(frames)
        obj = spec.objects[0]
        hits += found.colour == obj.colour and found.motion.direction == obj.direction
        straight.append(found.motion.r2)
    assert hits >= 0.95 * clips
    assert min(straight) >= 0.99


def test_the_detector_tracks_each_object_of_a_two_shape_clip():
    spec = ClipSpec(
        (
            MovingShape("circle", "yellow", "down", "quickly"),
            MovingShape("square", "cyan", "down-left", "slowly"),
        ),
        "black",
    )
    labels = colour_labels(render_clip(spec, *SMALL, seed=3))
    for obj in spec.objects:
        motion = track_motion(labels, obj.colour)
        assert (motion.direction, motion.speed) == (obj.direction, obj.speed)


def test_the_detector_says_static_unsteady_and_empty_when_they_are():
    spec = ClipSpec((MovingShape("triangle", "magenta", "right", "quickly"),), "dark grey")
    frames = render_clip(spec, *SMALL, seed=0)
    still = detect(np.repeat(frames[:1], len(frames), axis=0))
    assert still.colour == "magenta" and still.motion.direction == "static"
    shuffled = detect(frames[np.random.default_rng(0).permutation(len(frames))])
    assert shuffled.motion.r2 < 0.5  # the same positions out of order are no straight track
    blank = detect(np.zeros_like(frames))
    assert blank.colour is None and blank.motion is None


def test_track_spread_pulls_tracks_towards_the_centre_and_keeps_them_in_frame():
    height, width = 96, 160
    for seed in range(40):
        spec, layout = draw_clip(seed, "train", two_shape_prob=0.0)
        centred = object_tracks(spec, 17, height, width, layout, spread=0.0)
        ((track, radius),) = centred
        np.testing.assert_allclose(track[[0, -1]].mean(axis=0), (width / 2, height / 2), atol=1e-6)
        for spread in (0.3, 1.0):
            ((track, radius),) = object_tracks(spec, 17, height, width, layout, spread=spread)
            assert (track - radius >= 0).all() and (track[:, 0] + radius <= width).all()
            assert (track[:, 1] + radius <= height).all()
            middle = track[[0, -1]].mean(axis=0) - (width / 2, height / 2)
            assert (np.abs(middle) <= spread * np.array([width, height]) / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="spread=1.5"):
        object_tracks(spec, 17, height, width, layout, spread=1.5)


def test_full_spread_draws_the_clips_it_always_drew():
    spec, frames = make_clip(7, "train", 9, 64, 96)
    np.testing.assert_array_equal(frames, make_clip(7, "train", 9, 64, 96, spread=1.0)[1])
    assert not np.array_equal(frames, make_clip(7, "train", 9, 64, 96, spread=0.3)[1])
