"""The traced-program FLOP count against XLA's own count on the CPU."""

import jax
import jax.numpy as jnp
import pytest

from evalharness.estimates.traced_flops import matmul_flops


def _xla_flops(fn, *args):
    return jax.jit(fn).lower(*args).cost_analysis()["flops"]


def test_a_matrix_product_is_two_flops_per_multiply_add():
    a = jax.ShapeDtypeStruct((3, 5, 7), jnp.float32)
    b = jax.ShapeDtypeStruct((3, 7, 11), jnp.float32)
    assert matmul_flops(jnp.matmul, a, b) == 2 * 3 * 5 * 7 * 11


def test_a_grouped_strided_convolution_matches_xla():
    # VALID: XLA leaves implicit padding's taps out, the traced count keeps them (the VAE pads
    # explicitly, so its convolutions have none).
    x = jax.ShapeDtypeStruct((2, 8, 9, 10, 12), jnp.float32)  # N D H W C
    w = jax.ShapeDtypeStruct((3, 3, 3, 4, 12), jnp.float32)  # D H W I/groups O

    def conv(x, w):
        return jax.lax.conv_general_dilated(
            x,
            w,
            (1, 2, 1),
            "VALID",
            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
            feature_group_count=3,
        )

    assert matmul_flops(conv, x, w) == pytest.approx(_xla_flops(conv, x, w), rel=0.01)


def test_nested_programs_count_scan_bodies_per_step_and_the_costlier_branch():
    a = jax.ShapeDtypeStruct((16, 16), jnp.float32)
    one = 2 * 16**3

    def scanned(a):
        return jax.lax.scan(lambda c, _: (jax.jit(jnp.dot)(c, a), None), a, length=5)[0]

    def branches(p, a):
        return jax.lax.cond(p, lambda a: a @ a @ a, lambda a: a @ a, a)

    assert matmul_flops(scanned, a) == 5 * one
    assert matmul_flops(branches, jax.ShapeDtypeStruct((), jnp.bool_), a) == 2 * one
    assert matmul_flops(jax.checkpoint(lambda a: a @ a), a) == one


def test_a_while_loop_is_refused_by_name():
    def loop(a):
        return jax.lax.while_loop(lambda c: c[0, 0] < 10, lambda c: c @ c, a)

    with pytest.raises(ValueError, match="while loop"):
        matmul_flops(loop, jax.ShapeDtypeStruct((4, 4), jnp.float32))
