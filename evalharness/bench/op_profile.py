"""Device time per XLA operation of a few computations, read from a ``jax.profiler`` trace.

Where a benchmark's timings do not say where a computation's time goes (copies XLA inserts to
change an array's physical layout, a pad before a kernel), its profile does. ``profile_ops``
traces each computation alone for a few calls (warm: the caller has run it), reads the trace back
with ``jax.profiler.ProfileData`` and sums each operation's device time per call.

Which events count: on an accelerator, the ``XLA Ops`` line of every ``/device:`` plane (one event
per executed HLO operation, named by its instruction: on a TPU the whole HLO text, ``%copy.29 =
bf16[...] copy(...)``, of which the name before `` = `` is kept); on the CPU backend, which has no
device plane, the host events that carry an ``hlo_op`` statistic (the CPU runtime's thunks). A trace
with neither raises: a profile of nothing would read as "no time spent".

A control-flow operation (``while``, ``conditional``, ``call``) is an event of its own and its
body's operations are events too, so the per-call total leaves the containers out: each appears
in the list with its whole duration, and its body's time is counted once, in its operations.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax

DEVICE_OPS_LINE = "XLA Ops"
CONTAINER_KINDS = frozenset({"while", "conditional", "call"})
_NUMBERED = re.compile(r"[.\-]\d+$")  # "copy.113" -> "copy"; "fusion.54" -> "fusion"


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One operation's device time per call of the traced computation.

    Attributes:
        op: the HLO operation's name (``copy.113``, ``convolution_add_fusion``, a kernel's name).
        kind: the name without its numeric suffix (``copy``, ``pad``, ``fusion``).
        ms: device milliseconds per call (summed over its executions in one call).
        count: executions per call.
    """

    op: str
    kind: str
    ms: float
    count: float


@dataclasses.dataclass(frozen=True)
class OpProfile:
    """One computation's profile: its operations, slowest first.

    Attributes:
        ops: every operation seen, by device time per call, descending.
        calls: calls traced.
    """

    ops: tuple[OpTime, ...]
    calls: int

    @property
    def total_ms(self) -> float:
        """Device time per call: every operation but the containers (``CONTAINER_KINDS``),
        whose bodies' operations are counted themselves."""
        return sum(op.ms for op in self.ops if op.kind not in CONTAINER_KINDS)

    def by_kind(self) -> dict[str, float]:
        """Device ms per call summed per kind, largest first."""
        kinds: dict[str, float] = defaultdict(float)
        for op in self.ops:
            kinds[op.kind] += op.ms
        return dict(sorted(kinds.items(), key=lambda item: -item[1]))

    def to_json(self, top: int = 30) -> dict[str, Any]:
        """The ``top`` operations and every kind's total, for a benchmark's JSON."""
        return {
            "calls": self.calls,
            "total_ms": self.total_ms,
            "kinds_ms": self.by_kind(),
            "ops": [dataclasses.asdict(op) for op in self.ops[:top]],
        }


def _check_calls(calls: int) -> None:
    """Refuses a count of traced calls below one (a profile per call of nothing)."""
    if calls < 1:
        raise ValueError(f"calls={calls}: expected >= 1")


def op_kind(op: str) -> str:
    """``op`` without its numeric suffix: the kind of operation it is."""
    return _NUMBERED.sub("", op)


def op_name(event_name: str) -> str:
    """An operation's name from a device event's name: the instruction's name when the event is
    named by the whole HLO instruction (``%copy.29 = bf16[2,8]{1,0} copy(...)`` -> ``copy.29``),
    else the name as given."""
    if event_name.startswith("%") and " = " in event_name:
        return event_name[1:].split(" = ", 1)[0]
    return event_name


def _events(planes: Iterable[Any]) -> list[tuple[str, float]]:
    """(operation, duration ns) of every executed operation in the trace (module docstring)."""
    planes = list(planes)
    device = [
        (op_name(event.name), event.duration_ns)
        for plane in planes
        if plane.name.startswith("/device:")
        for line in plane.lines
        if line.name == DEVICE_OPS_LINE
        for event in line.events
    ]
    if device:
        return device
    return [
        (str(stats["hlo_op"]), event.duration_ns)
        for plane in planes
        for line in plane.lines
        for event in line.events
        if "hlo_op" in (stats := dict(event.stats))
    ]


def summarize_events(events: Iterable[tuple[str, float]], calls: int) -> OpProfile:
    """Per-call device time of each operation, from (operation, duration ns) events.

    Args:
        events: every executed operation of ``calls`` calls.
        calls: how many calls the events cover (>= 1).

    Raises:
        ValueError: ``calls`` < 1, or no events (nothing was traced).
    """
    _check_calls(calls)
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for op, ns in events:
        total[op] += ns
        count[op] += 1
    if not total:
        raise ValueError(
            "the trace holds no executed operation (no device 'XLA Ops' line and no host event "
            "with an hlo_op statistic): this JAX's profiler records none here"
        )
    ops = (OpTime(op, op_kind(op), ns / calls / 1e6, count[op] / calls) for op, ns in total.items())
    return OpProfile(tuple(sorted(ops, key=lambda t: -t.ms)), calls)


def profile_ops(
    fns: dict[str, Callable[[], Any]], calls: int = 3, trace_dir: str | Path | None = None
) -> dict[str, OpProfile]:
    """Traces each (already warm) computation alone for ``calls`` calls and profiles it.

    Args:
        fns: name -> zero-argument callable returning JAX arrays (compiled and run once before).
        calls: calls traced per computation (>= 1).
        trace_dir: where the traces are kept (one folder per name); None: a temporary folder,
            removed afterwards.

    Returns:
        name -> its ``OpProfile``, in the order of ``fns``.
    """
    _check_calls(calls)  # before any tracing
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(trace_dir) if trace_dir is not None else Path(scratch)
        profiles = {}
        for index, (name, fn) in enumerate(fns.items()):
            folder = root / f"{index:02d}-{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}"
            with jax.profiler.trace(str(folder)):
                for _ in range(calls):
                    jax.block_until_ready(fn())
            profiles[name] = summarize_events(_events(_planes(folder)), calls)
    return profiles


def _planes(folder: Path) -> list[Any]:
    """The planes of the one trace written under ``folder``."""
    files = sorted(folder.rglob("*.xplane.pb"))
    if not files:
        raise ValueError(f"no trace was written under {folder}")
    return list(jax.profiler.ProfileData.from_file(str(files[-1])).planes)
