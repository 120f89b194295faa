"""The dense ``attend``: one of the kernels' dense executors behind the model's attention contract.

``attend`` functions here are typed as plain callables: their contract is the model's ``AttendFn``
protocol (``attend(q, k, v, *, step, layer) -> out``), and kernels do not import the model.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from kernels.executors.dispatch import (
    DEFAULT_KERNEL_OPTIONS,
    Kernel,
    KernelOptions,
    make_attention,
)
from kernels.executors.pallas_tpu_cross import cross_attend_for
from kernels.plans.block_sizes import BlockSizes
from kernels.registry import DENSE_EXECUTORS, PLATFORMS, POLICY_BACKENDS


def check_backend(backend: str) -> None:
    """Raises ValueError unless ``backend`` is one of ``POLICY_BACKENDS``."""
    if backend not in POLICY_BACKENDS:
        raise ValueError(f"backend={backend!r}; use one of {POLICY_BACKENDS}")


def make_dense_attend(
    executor: str = "b0",
    *,
    backend: str = "xla",
    block_sizes: BlockSizes | None = None,
    options: KernelOptions = DEFAULT_KERNEL_OPTIONS,
) -> Callable[..., jax.Array]:
    """A dense ``attend`` function from the kernels executors, its kernel built once per sequence
    length.

    Args:
        executor: one of ``DENSE_EXECUTORS`` except "auto": "b0" (tiled online softmax on
            ``backend``), "splash" (TPU splash attention, its own tiles), "cudnn" (cuDNN flash
            attention, bf16), "dot_product_attention" (XLA einsum), "reference" (jnp oracle) or
            "xla_flash" (the CPU's, its own chunks). Backend "reference" always uses "reference".
        backend: "xla", "pallas_tpu", "pallas_gpu" or "reference".
        block_sizes: tiles for "b0"; default ``auto_block_sizes(tokens, backend)``.
        options: the kernels' backend settings (``KernelOptions``: interpret mode, the Pallas
            TPU kernel's key chunk and VMEM limit, the Pallas GPU kernel's warps and stages).

    Returns:
        ``attend(q, k, v, *, step, layer) -> out`` ignoring step and layer; with a
        ``cross_attend`` attribute where ``cross_attend_for(backend)`` gives one.

    Raises:
        ValueError: on an unknown backend or executor, or "auto" (resolve it first).
    """
    check_backend(backend)
    if executor == "auto":
        controls = ", ".join(f"{p.name}: {p.dense_control}" for p in PLATFORMS.values())
        raise ValueError(
            "executor='auto' must be resolved before building an attend: take "
            f"kernels.policy.dense_controls(platform) ({controls})"
        )
    if executor not in DENSE_EXECUTORS:
        raise ValueError(f"executor={executor!r}; use one of {DENSE_EXECUTORS[1:]}")
    if backend == "reference":
        executor = "reference"
    kernels: dict[int, Kernel] = {}

    def kernel_for(tokens: int) -> Kernel:
        if tokens not in kernels:
            if executor == "b0":
                kernels[tokens] = make_attention(
                    tokens, executor="b0", block_sizes=block_sizes, backend=backend, options=options
                )
            else:  # splash, xla_flash keep their own tiles: the policy's are the b0/band ones
                kernels[tokens] = make_attention(
                    tokens, executor=executor, options=KernelOptions(interpret=options.interpret)
                )
        return kernels[tokens]

    def dense_attend(q, k, v, *, step=None, layer=None):
        del step, layer
        return kernel_for(q.shape[1])(q, k, v)

    cross = cross_attend_for(backend, interpret=options.interpret)
    if cross is not None:
        dense_attend.cross_attend = cross
    return dense_attend
