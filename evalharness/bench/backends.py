"""How the kernel benchmark calls b0-b3 on each backend: "xla" (pure JAX, any platform),
"pallas_tpu" (Pallas TPU kernel) and "pallas_gpu" (Triton). Off its platform a Pallas kernel runs
only in interpret mode, which times the interpreter, so only when asked (``--interpret``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from kernels.executors import pallas_gpu_budget
from kernels.executors.dense_controls import splash_attention
from kernels.executors.dispatch import KernelOptions, attention
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import TilePlan

_LABELS = {"xla": "XLA", "pallas_tpu": "Pallas TPU", "pallas_gpu": "Pallas GPU (Triton)"}


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend as the benchmark runs it.

    Attributes:
        name: "xla", "pallas_tpu" or "pallas_gpu".
        interpret: Pallas interpret mode (ignored by "xla").
        num_warps, num_stages: the "pallas_gpu" launch (None: ``pallas_gpu_budget``'s defaults).
        vmem_limit_bytes: the Pallas TPU kernel's scoped VMEM limit (None: Mosaic's default).
    """

    name: str = "xla"
    interpret: bool = False
    num_warps: int | None = None
    num_stages: int | None = None
    vmem_limit_bytes: int | None = None

    @property
    def label(self) -> str:
        """Heading text, e.g. "Pallas GPU (Triton) backend, interpret mode"."""
        label = f"{_LABELS[self.name]} backend"
        return label + (", interpret mode" if self.interpret else "")

    def launch(self, block_q: int, head_dim: int) -> dict[str, int | None]:
        """num_warps and num_stages a b0-b3 call runs with (None off "pallas_gpu"), resolved
        here rather than in the kernel so that what is recorded is what ran."""
        if self.name != "pallas_gpu":
            return {"num_warps": None, "num_stages": None}
        warps, stages = self.num_warps, self.num_stages
        if warps is None:
            warps = pallas_gpu_budget.default_num_warps(block_q, head_dim)
        if stages is None:
            stages = pallas_gpu_budget.DEFAULT_NUM_STAGES
        return {"num_warps": warps, "num_stages": stages}

    def kernel_options(self, block_q: int, head_dim: int) -> KernelOptions:
        """A b0-b3 call's options: interpret mode, VMEM limit, ``launch``'s warps and stages."""
        return KernelOptions(
            interpret=self.interpret,
            vmem_limit_bytes=self.vmem_limit_bytes,
            **self.launch(block_q, head_dim),
        )

    def check_tiles(self, block_sizes: BlockSizes, tokens: int, head_dim: int, dtype) -> None:
        """Raises ValueError unless ``block_sizes`` suit this backend for the sequence: the
        granularity of ``BlockSizes.validate`` and, on "pallas_gpu" (interpret mode too, so a
        CPU refuses what the GPU would), ``pallas_gpu_budget.check_gpu_tiles``."""
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

    def dense_fn(self, variant: str) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
        """The dense control ``variant`` (mask-free), jitted; splash follows interpret mode."""
        options = KernelOptions(interpret=self.interpret)
        return jax.jit(lambda q, k, v: attention(q, k, v, None, executor=variant, options=options))

    def masked_peer_fn(self, band) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
        """JAX's splash given ``band`` (our band plus sink, a lazy mask), jitted: the peer of
        b1-b3 with the same mask; it follows interpret mode."""
        return jax.jit(
            lambda q, k, v: splash_attention(q, k, v, band=band, interpret=self.interpret)
        )


XLA = Backend()
