"""One tolerance-checking helper for every numerical test."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def assert_allclose(
    actual,
    expected,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    check_dtype: bool = False,
    err_msg: str = "",
) -> None:
    """Checks shape (and optionally dtype) first, then values in float32 (bf16 is upcast).

    Args:
        actual: array-like (JAX, NumPy or anything with ``__array__``).
        expected: array-like of the same shape.
        atol: absolute tolerance.
        rtol: relative tolerance.
        check_dtype: also require equal dtypes.
        err_msg: extra context printed on failure.
    """
    a = jnp.asarray(actual) if not isinstance(actual, np.ndarray) else actual
    e = jnp.asarray(expected) if not isinstance(expected, np.ndarray) else expected
    assert tuple(a.shape) == tuple(e.shape), f"shape {a.shape} != {e.shape}. {err_msg}"
    if check_dtype:
        assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}. {err_msg}"
    a32 = np.asarray(jnp.asarray(a, jnp.float32))
    e32 = np.asarray(jnp.asarray(e, jnp.float32))
    np.testing.assert_allclose(a32, e32, atol=atol, rtol=rtol, err_msg=err_msg)
