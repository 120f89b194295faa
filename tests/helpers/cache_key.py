"""The dense-arm cache key with its environment-derived inputs pinned, for the cache tests."""

from __future__ import annotations

import dataclasses

from evalharness.assembly import platform_choices
from evalharness.config.schemas import to_config
from evalharness.evidence.cache_key import dense_arm_key
from tests.helpers.harness_config import small_config

IDENTITY = "tiny|seed=0"
SHIFT = 3.0


def resolved_small_config(tmp):
    """The small test config, resolved for the CPU (what the run keys)."""
    return platform_choices.resolve(to_config(small_config(tmp)), "cpu")


def pinned_key(cfg, env, **overrides):
    """The key with every environment-derived input pinned (``overrides`` replace them)."""
    kwargs = {
        "identity": IDENTITY,
        "shift": SHIFT,
        "devices": 1,
        "step_callback": False,
        "environment": env,
        "code": "code-v1",
        **overrides,
    }
    return dense_arm_key(cfg, kwargs.pop("identity"), kwargs.pop("shift"), **kwargs)


def replace_field(cfg, dotted, value):
    """``cfg`` with one (possibly nested) field replaced."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return dataclasses.replace(cfg, **{head: value})
    return dataclasses.replace(cfg, **{head: replace_field(getattr(cfg, head), rest, value)})


def other_choice(value, choices):
    """The first of ``choices`` that is not ``value``."""
    return next(c for c in choices if c != value)
