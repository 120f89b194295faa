"""A dtype name has one JAX dtype, whoever asks (a config enum, a command line, the memory model)."""

import jax.numpy as jnp
import pytest

from evalharness.config.schemas import DType
from models.dtypes import DTYPE_NAMES, dtype_of


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_a_name_and_the_config_enum_give_the_same_dtype(name):
    assert dtype_of(name) == jnp.dtype(name)
    assert dtype_of(name).itemsize == jnp.dtype(name).itemsize
    if name in DType.__members__:
        assert dtype_of(DType(name)) is dtype_of(name)


def test_an_unknown_name_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValueError, match=r"'int8' is not supported; use one of \['bfloat16'"):
        dtype_of("int8")
