"""Fixtures of the dense-arm cache and cache-key tests: the small config the run keys, resolved for
the CPU, and this machine's environment fields."""

import pytest

from evalharness.evidence.cache_key import environment_fields
from tests.helpers.cache_key import resolved_small_config


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return resolved_small_config(tmp_path_factory.mktemp("cfg"))


@pytest.fixture(scope="module")
def env():
    return environment_fields()
