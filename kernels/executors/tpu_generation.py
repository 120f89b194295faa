"""Which TPU generation a kernel compiles for, and the scoped VMEM limit Mosaic gives it there.

A Pallas TPU kernel (ours or JAX's splash attention) gets a *scoped* VMEM limit from the compiler
unless it asks for one (``vmem_limit_bytes``); a kernel whose working set passes that limit fails
to compile (``CompileTimeScopedVmemOom``). The default differs by generation, and splash cannot ask
for more (its ``pallas_call`` sets no limit), so its tiles must fit the default of the chip it runs
on. One rule answers "how much scoped VMEM does a kernel get on this chip":

1. the compiler's own setting where it can be read: ``--xla_tpu_scoped_vmem_limit_kib=N`` in
   ``LIBTPU_INIT_ARGS`` (or ``XLA_FLAGS``) is the limit every kernel without its own gets;
2. otherwise the generation's default from ``SCOPED_VMEM_DEFAULTS`` (v5e: 16 MiB, read off
   Mosaic's refusal on a lent v5e; v6e: 32 MiB, from public v6e compile failures), by the
   device kind JAX reports;
3. otherwise (no TPU attached: a CPU test, a compile for a TPU from a CPU) the smallest default
   of those generations, so the choice fits every one of them.
"""

from __future__ import annotations

import os
import re

import jax

MiB = 1 << 20

# Default scoped VMEM per generation (bytes). v5e: "Scoped allocation with size 20.71M and limit
# 16.00M" (libtpu 0.0.42.1 on a lent TPU v5e); v6e: "... size 34.08M and limit 32.00M" in public
# compile failures on v6e. No Google page states either; openxla.org's error page E1001 ("Scoped
# Vmem OOM") names the knobs (--xla_tpu_scoped_vmem_limit_kib globally, vmem_limit_bytes per kernel).
SCOPED_VMEM_DEFAULTS: dict[str, int] = {"v5e": 16 * MiB, "v6e": 32 * MiB}
SMALLEST_SCOPED_VMEM = min(SCOPED_VMEM_DEFAULTS.values())
# What JAX calls each generation's chips (``jax.Device.device_kind``).
_DEVICE_KINDS: dict[str, str] = {"TPU v5 lite": "v5e", "TPU v5e": "v5e", "TPU v6 lite": "v6e"}
_FLAG = re.compile(r"--xla_tpu_scoped_vmem_limit_kib=(\d+)")


def generation_of(device_kind: str) -> str | None:
    """ "v5e", "v6e", ... for a device kind JAX reports ("TPU v6 lite"); None when unknown."""
    return _DEVICE_KINDS.get(device_kind.strip())


def attached_generation() -> str | None:
    """The generation of this process's first device when it is a TPU; None otherwise."""
    device = jax.devices()[0]
    return generation_of(device.device_kind) if device.platform == "tpu" else None


def flag_scoped_vmem() -> int | None:
    """The scoped VMEM limit set through the compiler's flag, in bytes (None when unset)."""
    for variable in ("LIBTPU_INIT_ARGS", "XLA_FLAGS"):
        found = _FLAG.findall(os.environ.get(variable, ""))
        if found:
            return int(found[-1]) * 1024
    return None


def scoped_vmem_limit(generation: str | None) -> int:
    """Scoped VMEM (bytes) a kernel that asks for none gets on ``generation`` (the module's rule).

    Args:
        generation: "v5e", "v6e", ... or None (not known: the smallest default, which fits all).
    """
    flagged = flag_scoped_vmem()
    if flagged is not None:
        return flagged
    return SCOPED_VMEM_DEFAULTS.get(generation or "", SMALLEST_SCOPED_VMEM)


def describe_limit(generation: str | None) -> str:
    """E.g. "16 MiB, v5e's default" or "24 MiB, set by --xla_tpu_scoped_vmem_limit_kib"."""
    limit = scoped_vmem_limit(generation)
    if flag_scoped_vmem() is not None:
        source = "set by --xla_tpu_scoped_vmem_limit_kib"
    elif generation in SCOPED_VMEM_DEFAULTS:
        source = f"{generation}'s default"
    else:
        source = "the smallest TPU default, no TPU attached"
    return f"{limit / MiB:g} MiB, {source}"
