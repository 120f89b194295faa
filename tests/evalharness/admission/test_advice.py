"""Advice that works: settings are applied to the config and the run planned again."""

import dataclasses
from types import SimpleNamespace

from evalharness.admission.advice import Setting, apply_setting, checked_advice
from evalharness.config import GuidancePasses, to_config
from tests.helpers.harness_config import small_config

GIB = 2**30


def _config(tmp_path, *overrides):
    return to_config(small_config(tmp_path, *overrides, small=False))


def test_settings_are_applied_as_a_user_would_type_them(tmp_path):
    cfg = _config(tmp_path, "model=wan2.1-t2v-14b", "resolution=1440p")
    changed = apply_setting(
        cfg, {"guidance_passes": "separate", "resolution": "1080p", "parallel.sequence": 4}
    )
    assert changed.guidance_passes is GuidancePasses.separate
    assert (changed.resolution.name, changed.resolution.height) == ("1080p", 1088)
    assert changed.parallel.sequence == 4 and cfg.parallel.sequence == 0  # a copy


def _sizing(peak_gib: float, fits: bool, *, batch=2, devices=1, device_devices=1):
    memory = SimpleNamespace(
        peak_bytes=peak_gib * GIB,
        device_bytes=31.25 * GIB,
        executors={"dense": "splash", "noise_floor": "b0"},
        arms=("dense", "noise_floor", "sparse"),
    )
    target = SimpleNamespace(platform="tpu", devices=device_devices)
    return SimpleNamespace(memory=memory, target=target, batch=batch, devices=devices, fits=fits)


def test_a_pair_is_named_when_no_setting_fits_alone(tmp_path):
    cfg = _config(tmp_path, "model=wan2.1-t2v-14b", "resolution=1440p", "dtype=bfloat16")
    planned = []

    def plan(candidate):
        planned.append(candidate)
        separate = candidate.guidance_passes is GuidancePasses.separate
        smaller = candidate.resolution.name == "1080p"
        return _sizing(20.0 if separate and smaller else 40.0, separate and smaller)

    advice = checked_advice(cfg, _sizing(60.0, False), plan)
    assert advice == ["guidance_passes=separate resolution=1080p: fits, peak 20.00 GiB (checked)"]
    assert len(planned) == 3  # two alone, then the one pair


def test_only_settings_that_fit_are_printed(tmp_path):
    cfg = _config(tmp_path, "model=wan2.1-t2v-14b", "resolution=1440p", "dtype=bfloat16")

    def plan(candidate):
        separate = candidate.guidance_passes is GuidancePasses.separate
        return _sizing(25.0 if separate else 40.0, separate)

    advice = checked_advice(cfg, _sizing(60.0, False, devices=1, device_devices=8), plan)
    assert advice == ["guidance_passes=separate: fits, peak 25.00 GiB (checked)"]


def test_settings_str_is_the_command_line():
    assert str(Setting({"dtype": "bfloat16", "model.param_dtype": "bfloat16"})) == (
        "dtype=bfloat16 model.param_dtype=bfloat16"
    )
    assert dataclasses.is_dataclass(Setting)
