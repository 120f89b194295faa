"""Negative controls: deliberately broken sparse arms that a sound gate must fail.

``none`` is the correct arm; the others break one thing the seed's design relies on:

- ``all_spatial``: every head runs the band in frame-major order (the spatial mask), whatever
  routing chose; temporal heads lose the other frames.
- ``all_temporal``: every head runs the band in the temporal layout; spatial heads lose most of
  their own frame.
- ``inverted``: each head gets the layout routing did not choose.
- ``no_unpermute``: routing and the band are correct, but temporal heads' outputs stay in the
  temporal layout instead of being restored to frame-major order, so their rows land on the wrong
  tokens.

Those are quality controls: the video changes and the PSNR gate must fail them. One control is a
speed control (``SPEED_CONTROLS``), for the speedup gate:

- ``redundant_dense``: every sparse cell also runs the dense executor on the same q, k, v and
  discards the result (``with_discarded``), so the sparse arm does all of the dense arm's attention
  work on top of its own while its output stays bit-identical to the correct arm's: only the time
  is broken.

Routing itself always runs (same cost, same sampled rows), so a control changes only what its name
says. ``none`` adds nothing to the traced program: the policy checks the control in Python and
takes the unchanged path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

QUALITY_CONTROLS = ("none", "all_spatial", "all_temporal", "inverted", "no_unpermute")
SPEED_CONTROLS = ("redundant_dense",)
NEGATIVE_CONTROLS = QUALITY_CONTROLS + SPEED_CONTROLS


def check_negative_control(control: str) -> str:
    """The control's name as a plain string, after checking it is one of ``NEGATIVE_CONTROLS``.

    Args:
        control: a name (a ``str`` or a ``StrEnum`` member of the config).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if not isinstance(control, str) or control not in NEGATIVE_CONTROLS:
        raise ValueError(f"negative_control={control!r}; use one of {NEGATIVE_CONTROLS}")
    return str(control)


def controlled_flags(control: str, temporal: jax.Array) -> jax.Array:
    """The layout flags a control runs, given the ones routing chose.

    Args:
        control: one of ``NEGATIVE_CONTROLS``.
        temporal: bool [batch, heads], routing's choice (True: temporal layout).

    Returns:
        bool [batch, heads]: ``temporal`` itself for ``none`` and ``no_unpermute``, all False for
        ``all_spatial``, all True for ``all_temporal``, its negation for ``inverted``.
    """
    control = check_negative_control(control)
    if control == "all_spatial":
        return jnp.zeros_like(temporal, dtype=bool)
    if control == "all_temporal":
        return jnp.ones_like(temporal, dtype=bool)
    if control == "inverted":
        return jnp.logical_not(temporal)
    return temporal


def runs_redundant_dense(control: str) -> bool:
    """Whether sparse cells also run the dense executor and discard it (``redundant_dense``)."""
    return check_negative_control(control) == "redundant_dense"


def with_discarded(out: jax.Array, discarded: jax.Array) -> jax.Array:
    """``out`` unchanged, with ``discarded`` still computed: ``out + 0 * discarded``.

    XLA does not fold a float multiplication by zero (``x * 0`` is NaN for an infinite x), so the
    work that produces ``discarded`` stays in the compiled program; for a finite ``discarded``
    the sum is ``out`` exactly (adding +0.0 changes no float but the sign of a -0.0).

    Args:
        out: any shape.
        discarded: the same shape, finite.

    Returns:
        ``out``'s values, in its dtype.
    """
    return out + (discarded * 0).astype(out.dtype)


def restores_layout(control: str) -> bool:
    """Whether temporal heads' outputs go back to frame-major order (False only for
    ``no_unpermute``)."""
    return check_negative_control(control) != "no_unpermute"
