"""Peak memory of an executor from XLA's compiled memory analysis (nothing is run)."""

from __future__ import annotations

from collections.abc import Callable

import jax


def compiled_peak_bytes(fn: Callable, *shapes: jax.ShapeDtypeStruct) -> int:
    """Arguments + outputs + temporaries of ``jax.jit(fn)`` compiled for ``shapes``.

    Args:
        fn: the function (q, k, v) -> out.
        *shapes: abstract arguments.

    Returns:
        Bytes XLA plans to hold at once (an upper bound on live buffers, excluding the runtime).
    """
    analysis = jax.jit(fn).lower(*shapes).compile().memory_analysis()
    return int(
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
    )
