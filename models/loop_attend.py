"""How the denoising loop talks to its ``attend``: the step phases it runs apart, where a
recording attend's routing goes (an output the loop returns, or a host callback behind a runtime
flag), and which batch offset a separate guidance pass hands it.

Every capability is optional and duck-typed: the model's ``AttendFn`` contract is only
``attend(q, k, v, *, step, layer)``; a sparse policy (``kernels.policy``) offers the rest.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from models.attention import AttendFn


def step_phases_of(
    attend: AttendFn | None, num_steps: int
) -> list[tuple[int, int, AttendFn | None]]:
    """``[(start, stop, attend)]``: the loop's steps in the phases ``attend`` tells apart
    (``step_phases``, as a sparse policy offers: its dense steps, then its sparse steps), else
    one phase of every step."""
    if attend is None or not hasattr(attend, "step_phases"):
        return [(0, num_steps, attend)]
    return attend.step_phases(num_steps)


def load_routing(recorder: Any, out: Any) -> None:
    """Hands a recording run's returned routing to ``recorder`` (nothing without one)."""
    if recorder is not None and out.routing is not None:
        recorder.load(*out.routing)


def collects_routing(attend: AttendFn | None, model: Any, guidance_passes: str) -> bool:
    """Whether the loop returns its recording attend's routing as an output (``routing_output``,
    ``collecting_into``): every attention call must be traced in the loop body itself, so the
    model's layers unrolled and one model call per step (joint guidance passes)."""
    return (
        records_routing(attend)
        and hasattr(attend, "collecting_into")
        and not getattr(model, "scan_layers", False)
        and guidance_passes == "joint"
        and attention_heads(model) is not None
    )


def attention_heads(model: Any) -> int | None:
    """The model's attention heads (its config's ``num_attention_heads``; None if it has none)."""
    return getattr(getattr(model, "config", None), "num_attention_heads", None)


def records_routing(attend: AttendFn | None) -> bool:
    """Whether ``attend`` records routing and takes a runtime flag for it (``recording_when``)."""
    return bool(getattr(attend, "records", False)) and hasattr(attend, "recording_when")


def record_flag(records: bool, record: bool) -> jax.Array | None:
    """The loop's runtime ``record`` argument: a bool scalar where the loop records, else None."""
    return jnp.asarray(record, bool) if records else None


def at_batch_offset(attend: AttendFn | None, offset: jax.Array) -> AttendFn | None:
    """``attend`` for a call whose samples are ``offset`` (a traced int32 scalar) onwards of the
    step's batch (an attend that records per-sample data offers ``at_batch_offset``; any other
    is shared as it is)."""
    shift = getattr(attend, "at_batch_offset", None)
    return attend if shift is None else shift(offset)
