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

Routing itself always runs (same cost, same sampled rows), so a control changes only what its name
says. ``none`` adds nothing to the traced program: the policy checks the control in Python and
takes the unchanged path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEGATIVE_CONTROLS = ("none", "all_spatial", "all_temporal", "inverted", "no_unpermute")


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


def restores_layout(control: str) -> bool:
    """Whether temporal heads' outputs go back to frame-major order (False only for
    ``no_unpermute``)."""
    return check_negative_control(control) != "no_unpermute"
