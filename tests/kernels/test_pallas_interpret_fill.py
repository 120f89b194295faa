"""What the Pallas interpreter reads past an array's end: NaN, for the float dtypes the kernels
read.

The Pallas TPU kernels' ragged-tile tests (a last query or key tile running past the tokens, in
``test_pallas_tpu.py``, ``test_pallas_tpu_cross.py``, ``test_pallas_tpu_routing.py`` and the
large-logit tests) prove the kernels' masking on a CPU only through this fill: a key past the
end that a kernel forgot to mask, or a row of v it forgot to zero, turns the outputs NaN and the
oracle comparison fails. Were the fill zeros, a forgotten zeroing of v's rows would go unseen
(zero rows add nothing) and a forgotten key mask would only add exp(0 - max) to each row's
weights, small where the row's maximum is large. This test states the fill; if a JAX upgrade
changes it, it fails first, and the ragged tests need another proof of the masking (say, finite
garbage written past the end of padded operands).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

TOKENS, TILE, LANES = 200, 128, 128  # two tiles: rows 200..255 of the second are past the end


def _copy_kernel(x_ref, o_ref) -> None:
    o_ref[...] = x_ref[...].astype(o_ref.dtype)


def _read_past_the_end(x: jax.Array, block: tuple, index) -> np.ndarray:
    """Copies each tile of ``x`` into a float32 output two whole tiles long (so nothing the
    kernel writes is clipped), as the kernels read ragged tiles in interpret mode."""
    rows = 2 * TILE
    out_shape = (*x.shape[:-2], rows, x.shape[-1])
    out = pl.pallas_call(
        _copy_kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec(block, index)],
        out_specs=pl.BlockSpec(block, index),
        out_shape=jax.ShapeDtypeStruct(out_shape, jnp.float32),
        interpret=True,
    )(x)
    return np.asarray(out)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", ["rows", "in-place"])
def test_reads_past_the_end_are_nan(dtype, layout):
    """Rows [TOKENS, 2 * TILE) of the last tile are NaN, the rows before them the array's own:
    as a plain [tokens, lanes] array, and in place as [batch, tokens, heads * head_dim] read one
    head's column block (``kernels.executors.pallas_tpu_operands``)."""
    values = np.arange(TOKENS * LANES, dtype=np.float32).reshape(TOKENS, LANES) % 251
    if layout == "rows":
        x = jnp.asarray(values, dtype)
        got = _read_past_the_end(x, (TILE, LANES), lambda i: (i, 0))
    else:  # batch 1, two heads of 128: head 1's columns
        x = jnp.asarray(np.concatenate([values, values + 1], axis=1)[None], dtype)
        got = _read_past_the_end(x, (None, TILE, LANES), lambda i: (0, i, 1))[0, :, LANES:]
        values = values + 1
    np.testing.assert_array_equal(got[:TOKENS], np.asarray(jnp.asarray(values, dtype), np.float32))
    past = got[TOKENS:]
    assert np.isnan(past).all(), (
        f"the Pallas interpreter (jax {jax.__version__}) now fills reads past an array's end "
        f"with {np.unique(past[~np.isnan(past)])[:5]}, not NaN: the ragged-tile tests no longer "
        "prove the kernels mask the keys past the end"
    )
