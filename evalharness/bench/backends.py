"""Which executors the kernel benchmark times on each backend, and how it calls them.

| backend | b0-b3 | dense control | platform |
|---|---|---|---|
| "xla" | pure JAX (``kernels.executors.xla_blocksparse``) | "dot_product_attention" | any |
| "pallas_tpu" | Pallas TPU kernel | "splash" (JAX's TPU splash attention) | tpu |
| "pallas_gpu" | Pallas GPU (Triton) kernel | "cudnn" (cuDNN flash attention, bf16) | gpu |

A Pallas backend off its platform runs only in Pallas interpret mode, which times the interpreter,
not the kernel; the benchmark refuses that unless asked for explicitly (``--interpret``), so an
interpreter's numbers are never read as a kernel's by mistake.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from kernels.executors import pallas_gpu_budget
from kernels.executors.dispatch import BACKENDS, KernelOptions, attention
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import TilePlan

# Backend -> the dense flash-style executor of its platform that the sparse rows are compared to.
DENSE_CONTROLS = {"xla": "dot_product_attention", "pallas_tpu": "splash", "pallas_gpu": "cudnn"}
# Backend -> the value of ``jax.default_backend()`` its kernels need without interpret mode.
PLATFORMS = {"pallas_tpu": "tpu", "pallas_gpu": "gpu"}
_LABELS = {"xla": "XLA", "pallas_tpu": "Pallas TPU", "pallas_gpu": "Pallas GPU (Triton)"}


def platform_problem(backend: str, interpret: bool) -> str | None:
    """Why ``backend`` cannot be timed here as asked, or None when it can.

    Args:
        backend: one of ``kernels.executors.dispatch.BACKENDS``.
        interpret: whether Pallas interpret mode was asked for.

    Returns:
        A message naming ``--interpret`` for a Pallas backend off its platform without interpret
        mode; a message for ``--interpret`` on "xla" (it has no Pallas kernels); else None.
    """
    if backend not in BACKENDS:
        return f"--backend {backend}: use one of {', '.join(BACKENDS)}"
    if backend == "xla":
        return "--interpret runs Pallas kernels; --backend xla has none" if interpret else None
    platform = jax.default_backend()
    if interpret or platform == PLATFORMS[backend]:
        return None
    return (
        f"--backend {backend} times the {_LABELS[backend]} kernels, which need a "
        f"{PLATFORMS[backend].upper()}, but JAX's default backend here is {platform!r}. Run on a "
        f"{PLATFORMS[backend].upper()} machine, or pass --interpret to run the kernels in Pallas "
        "interpret mode (for checking the benchmark, not for timings: it times the interpreter)"
    )


def dense_control_problem(backend: str, dtype, head_dim: int) -> str | None:
    """Why the dense control of ``backend`` cannot run here, or None when it can.

    Args:
        backend: one of ``DENSE_CONTROLS``.
        dtype: the inputs' dtype.
        head_dim: the head dimension.

    Returns:
        For "pallas_gpu" without a GPU, or with inputs cuDNN refuses, the reason; else None
        (splash runs in interpret mode off a TPU, the XLA einsum anywhere).
    """
    if backend != "pallas_gpu":
        return None
    if jax.default_backend() != "gpu":
        return (
            f"cudnn row dropped: cuDNN flash attention needs a GPU and JAX's backend here is "
            f"{jax.default_backend()!r}, so there is no dense control and the checks against it "
            "are not evaluated"
        )
    if jnp.dtype(dtype) != jnp.dtype(jnp.bfloat16):
        return (
            f"cudnn row dropped: cuDNN flash attention takes bfloat16 inputs, not "
            f"{jnp.dtype(dtype).name}; rerun with --dtype bfloat16 for the dense control"
        )
    if head_dim % 8 or head_dim > 256:
        return f"cudnn row dropped: cuDNN takes head_dim a multiple of 8 up to 256, not {head_dim}"
    return None


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend as the benchmark runs it.

    Attributes:
        name: "xla", "pallas_tpu" or "pallas_gpu".
        interpret: Pallas interpret mode (ignored by "xla").
        num_warps: warps per program on "pallas_gpu"; None picks per tile
            (``pallas_gpu_budget.default_num_warps``).
        num_stages: pipelining stages on "pallas_gpu"; None takes
            ``pallas_gpu_budget.DEFAULT_NUM_STAGES``.
    """

    name: str = "xla"
    interpret: bool = False
    num_warps: int | None = None
    num_stages: int | None = None

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ValueError(f"backend={self.name!r}; use one of {BACKENDS}")
        if self.name != "pallas_gpu" and (self.num_warps, self.num_stages) != (None, None):
            raise ValueError("--num-warps and --num-stages apply to --backend pallas_gpu only")

    @property
    def label(self) -> str:
        """Heading text, e.g. "Pallas GPU (Triton) backend, interpret mode"."""
        label = f"{_LABELS[self.name]} backend"
        return label + (", interpret mode" if self.interpret else "")

    @property
    def dense_control(self) -> str:
        """The dense control of this backend's platform (``DENSE_CONTROLS``)."""
        return DENSE_CONTROLS[self.name]

    def launch(self, block_q: int, head_dim: int) -> dict[str, int | None]:
        """num_warps and num_stages a b0-b3 call runs with (None off "pallas_gpu").

        Resolved here rather than left to the kernel so that what is recorded is what ran.
        """
        if self.name != "pallas_gpu":
            return {"num_warps": None, "num_stages": None}
        warps = self.num_warps
        if warps is None:
            warps = pallas_gpu_budget.default_num_warps(block_q, head_dim)
        stages = self.num_stages
        if stages is None:
            stages = pallas_gpu_budget.DEFAULT_NUM_STAGES
        return {"num_warps": warps, "num_stages": stages}

    def kernel_options(self, block_q: int, head_dim: int) -> KernelOptions:
        """The options a b0-b3 call runs with: interpret mode and ``launch``'s warps and stages."""
        return KernelOptions(interpret=self.interpret, **self.launch(block_q, head_dim))

    def check_tiles(self, block_sizes: BlockSizes, tokens: int, head_dim: int, dtype) -> None:
        """Raises ValueError unless ``block_sizes`` suit this backend for the sequence.

        The tile granularity of ``BlockSizes.validate`` and, on "pallas_gpu", the shared-memory
        budget of ``pallas_gpu_budget.check_gpu_tiles`` (also in interpret mode, so a check run
        on a CPU refuses what the GPU would).
        """
        block_sizes.validate(tokens, self.name)
        if self.name == "pallas_gpu":
            stages = self.launch(block_sizes.block_q, head_dim)["num_stages"]
            pallas_gpu_budget.check_gpu_tiles(
                block_sizes.block_q,
                block_sizes.block_kv,
                head_dim,
                jnp.dtype(dtype),
                num_stages=stages,
            )

    def attend(self, q: jax.Array, k: jax.Array, v: jax.Array, plan: TilePlan) -> jax.Array:
        """b0-b3 by ``plan`` on this backend (traceable)."""
        options = self.kernel_options(plan.block_sizes.block_q, q.shape[3])
        return attention(q, k, v, plan, executor=None, backend=self.name, options=options)

    def sparse_fn(self, plan: TilePlan) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
        """``attend`` with ``plan``, jitted."""
        return jax.jit(lambda q, k, v: self.attend(q, k, v, plan))

    def dense_fn(
        self, variant: str | None = None
    ) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
        """A dense control (default this backend's), jitted; splash follows interpret mode."""
        variant = self.dense_control if variant is None else variant
        options = KernelOptions(interpret=self.interpret)
        return jax.jit(lambda q, k, v: attention(q, k, v, None, executor=variant, options=options))


XLA = Backend()
