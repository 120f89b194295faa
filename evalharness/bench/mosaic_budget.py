"""``python -m evalharness.bench.mosaic_budget``: our SMEM/VMEM model against Mosaic's own verdict.

For each resolution and tile pair (with and without ``vmem_limit_bytes``) the Pallas TPU kernel
is planned at one chip's real shape (14B over 8 v6e chips after the head exchange: every token,
5 heads of 128, bf16, batch 2, the aggressive schedule's band); our budget
(``kernels.executors.pallas_tpu_budget``) says whether it fits SMEM and the scoped VMEM limit,
and Mosaic, through libtpu's compile-only v6e topology, compiles it with our check off
(``check_budget=False``), its refusal condensed to one line. A row where the verdicts differ is a
disagreement to explain or fix. Needs the ``tpu`` extra; nothing runs on a TPU.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import jax.numpy as jnp

from evalharness.config import load_resolution
from evalharness.estimates import compile_for, compiler_reason, topology_compiler
from evalharness.formatting import markdown_table
from kernels.executors.pallas_tpu import pallas_blocksparse_attention
from kernels.executors.pallas_tpu_budget import check_tpu_budget
from kernels.masks.band import band_for_density
from kernels.plans.block_sizes import AUTO_TILES, BlockSizes
from kernels.plans.tiles import build_plan

MiB = 2**20
# (block_q, block_kv, vmem_limit_bytes): the seed's tiles with the automatic limit, with the
# compiler's default 32 MiB forced and with a raised one; smaller tiles; pairs at the edge of
# the default limit; pairs our model refuses.
_SEED_Q, _SEED_KV = AUTO_TILES["pallas_tpu"]
TILE_PAIRS = (
    (_SEED_Q, _SEED_KV, None),
    (_SEED_Q, _SEED_KV, 32 * MiB),
    (_SEED_Q, _SEED_KV, 64 * MiB),
    (1024, 1024, None),
    (2048, 2048, None),
    (2048, 2048, 32 * MiB),
    (4096, 2048, None),
    (4096, 4096, None),
    (8192, 4096, None),
    (512, 512, None),
)
RESOLUTIONS = ("720p", "1440p")


def sweep_row(
    resolution: str, block_q: int, block_kv: int, vmem_limit: int | None, *, heads: int = 5
) -> dict[str, Any]:
    """One tile pair at one resolution: our verdict beside Mosaic's."""
    geometry = load_resolution(resolution).tokens
    mask = band_for_density(geometry, 0.25)
    plan = build_plan(mask, BlockSizes(block_q, block_kv), "b3", rounding_tolerance=None)
    budget = check_tpu_budget(plan, "b3", 128, jnp.bfloat16, vmem_limit_bytes=vmem_limit)
    qkv = jax.ShapeDtypeStruct((2, geometry.tokens, heads, 128), jnp.bfloat16)

    def call(q, k, v):
        return pallas_blocksparse_attention(
            q, k, v, plan, variant="b3", vmem_limit_bytes=vmem_limit, check_budget=False
        )

    start = time.perf_counter()
    try:
        program = compile_for(topology_compiler("v6e:1x1").device, call, qkv, qkv, qkv)
        mosaic, temp = "compiles", program.temp_bytes / MiB
    except Exception as error:  # noqa: BLE001 - Mosaic's refusal is the figure measured
        mosaic, temp = f"refused: {compiler_reason(error)}", None
    return {
        "res": resolution,
        "tiles": f"{block_q} x {block_kv}",
        "vmem_limit asked": "auto" if vmem_limit is None else f"{vmem_limit // MiB} MiB",
        "model VMEM MiB": budget.vmem_bytes / MiB,
        "limit MiB": budget.vmem_limit / MiB,
        "model SMEM KiB": budget.smem_bytes / 1024,
        "model": "fits" if budget.fits else "refuses",
        "Mosaic": mosaic,
        "agree": "yes" if budget.fits == (mosaic == "compiles") else "NO",
        "temp MiB": temp,
        "compile s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    """Prints the sweep (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolutions", nargs="+", default=RESOLUTIONS)
    args = parser.parse_args(argv)
    rows = []
    for resolution in args.resolutions:
        for block_q, block_kv, limit in TILE_PAIRS:
            rows.append(sweep_row(resolution, block_q, block_kv, limit))
            print(rows[-1], flush=True)
    text = {"res", "tiles", "vmem_limit asked", "model", "Mosaic", "agree"}
    columns = [(k, k, "{}" if k in text else "{:,.1f}") for k in rows[0]]
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
