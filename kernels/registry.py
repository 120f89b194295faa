"""The attention executors and backends: the one table every list of their names derives from.

An executor computes ``softmax(q k^T / sqrt(d)) v`` on [batch, tokens, heads, head_dim]. Two kinds:

- **dense controls** take no mask: the peers' kernels (JAX's ``dot_product_attention``, splash on
  a TPU, cuDNN's flash attention on a GPU), ours (``xla_flash``, the CPU's flash-style control)
  and ``reference``, the plain softmax every optimised path is tested against;
- **tiled executors** (``b0``-``b3``) run a ``kernels.plans.tiles.TilePlan`` on a backend: b0
  computes every tile (a dense control too), b1 masks every visited tile, b2 skips empty tiles
  and masks the rest, b3 also runs full tiles without a mask.

Nothing here imports the executors: this module is data, readable from every kernel layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Executor:
    """One attention executor.

    Attributes:
        name: what a config, command line or ``kernels.executors.attention`` names it.
        tiled: runs a tile plan on a backend (the sparse arm's variants and b0).
        dense: may serve as a dense arm's or the noise floor's executor (no mask).
        ours: implemented in this project (the others are JAX's or a vendor's).
        memory: how its temporaries grow with tokens N: "linear" (tile-sized scratch) or
            "quadratic" (materialised [B, H, N, N] scores).
        only_on: the one platform it runs on ("tpu", "gpu"; compiling it elsewhere fails deep
            inside XLA), or None where it runs on any.
    """

    name: str
    tiled: bool
    dense: bool
    ours: bool
    memory: Literal["linear", "quadratic"]
    only_on: str | None = None


# In the order a config's choices list them: the dense controls, then the sparse variants.
_TABLE = (
    Executor("b0", tiled=True, dense=True, ours=True, memory="linear"),
    Executor("splash", tiled=False, dense=True, ours=False, memory="linear", only_on="tpu"),
    Executor("cudnn", tiled=False, dense=True, ours=False, memory="linear", only_on="gpu"),
    Executor("dot_product_attention", tiled=False, dense=True, ours=False, memory="quadratic"),
    Executor("reference", tiled=False, dense=True, ours=True, memory="quadratic"),
    Executor("xla_flash", tiled=False, dense=True, ours=True, memory="linear"),
    Executor("b1", tiled=True, dense=False, ours=True, memory="linear"),
    Executor("b2", tiled=True, dense=False, ours=True, memory="linear"),
    Executor("b3", tiled=True, dense=False, ours=True, memory="linear"),
)
EXECUTORS: dict[str, Executor] = {e.name: e for e in _TABLE}

# Where a tiled executor runs: XLA on any device, the Pallas kernel on a TPU (Mosaic) or a GPU
# (Triton). A run's policy may also name "reference" (every call through the plain softmax).
TILED_BACKENDS = ("xla", "pallas_tpu", "pallas_gpu")
POLICY_BACKENDS = (*TILED_BACKENDS, "reference")


def executor_names(
    *,
    tiled: bool | None = None,
    dense: bool | None = None,
    ours: bool | None = None,
    memory: str | None = None,
) -> tuple[str, ...]:
    """Names of the executors with the given properties (None: either), in table order."""
    wanted = {"tiled": tiled, "dense": dense, "ours": ours, "memory": memory}
    return tuple(
        e.name
        for e in _TABLE
        if all(value is None or getattr(e, key) == value for key, value in wanted.items())
    )


def get_executor(name: str) -> Executor:
    """The executor called ``name``.

    Raises:
        ValueError: naming the executors there are.
    """
    if name not in EXECUTORS:
        raise ValueError(f"executor={name!r}; use one of {tuple(EXECUTORS)}")
    return EXECUTORS[name]


# The variants of a tile plan (b0 dense, b1-b3 sparse) and the untiled dense controls.
TILED_VARIANTS = executor_names(tiled=True)
UNTILED_DENSE = executor_names(tiled=False, dense=True)
# Dense executors a run may name; "auto" is resolved per platform (``dense_controls``).
DENSE_EXECUTORS = ("auto", *executor_names(dense=True))


@dataclass(frozen=True)
class Platform:
    """What attention runs on one platform when a config says ``auto``.

    Attributes:
        name: "tpu", "gpu" or "cpu" (a JAX device's platform; "cuda" is "gpu").
        backend: where the tiled executors run there.
        dense_control: the dense arm's executor, the fastest dense attention measured there.
        noise_floor_control: the second dense control (differs from the first: the noise floor
            compares two executors).
        export_platform: ``jax.export``'s name for it, where a plan is lowered for it from
            another machine (None: this host's platform, nothing to lower).
    """

    name: str
    backend: str
    dense_control: str
    noise_floor_control: str
    export_platform: str | None


# Why each control: kernels/executors/dense_controls.py; why each backend and tile:
# evalharness/assembly/platform_choices.py.
PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("tpu", "pallas_tpu", "splash", "b0", "tpu"),
        Platform("gpu", "pallas_gpu", "cudnn", "b0", "cuda"),
        Platform("cpu", "xla", "xla_flash", "dot_product_attention", None),
    )
}


def get_platform(name: str) -> Platform:
    """The platform called ``name`` ("cuda" names the GPU; ROCm has no cuDNN, so no entry).

    Raises:
        ValueError: naming the platforms there are.
    """
    name = "gpu" if name == "cuda" else name
    if name not in PLATFORMS:
        raise ValueError(f"platform={name!r}; use one of {tuple(PLATFORMS)}")
    return PLATFORMS[name]
