"""``python -m evalharness.bench.dense_cpu``: is our CPU dense control as fast as PyTorch's?

Times, round-robin in one process, the CPU's dense executors beside the sparse one, one table per
geometry, float32, the band+sink mask at density 0.39:

- "long": 16,128 tokens (21 x 24 x 32), 2 heads x 128, batch 1, 768 x 768 tiles (7.5x the
  default job's sequence, where the kernels differ most);
- "default": the default job's call, 2,160 tokens (9 x 12 x 20), 4 heads x 64, batch 2 (the
  guided pair), 128 x 128 tiles (the CPU's auto tiles).

Rows: "xla_flash" (our CPU dense control), "b0" (the block-sparse scan over every tile), "b3"
(the sparse kernel), "torch_sdpa" (``torch.nn.functional.scaled_dot_product_attention``) when
torch imports, "xla_matmuls" / "torch_matmuls" (only the two matmuls of xla_flash's steps, at its
block shapes: ``evalharness.bench.matmul_ceiling``) and "dot_product_attention" (the CPU's
noise-floor control, XLA einsum).

Ratios are paired: each round runs every row once and a ratio's median is over the rounds'
ratios, so drift on a shared machine cancels. "dot_product_attention" is timed in rounds of its
own after the others (its ratios are of medians, marked unpaired): it writes the whole
[B, H, N, N] score array, and inside the rounds it slowed the row after it by up to 17%
(xla_flash 1,060 -> 1,240 ms at "long"). "GFLOP/s per core" divides each row's FLOPs (padding and
executed tiles included) by its CPU time, which a loaded machine blurs less than wall time.

The checks: xla_flash / torch_sdpa <= 1.2 at both geometries; B3's speedup over xla_flash within
1.05x of the ideal (1 / executed-pairs fraction of B3's plan) at "long". Beside them the ceiling:
xla_matmuls / torch_sdpa, below which xla_flash / torch_sdpa cannot go however its softmax is
written.

Usage:
    python -m evalharness.bench.dense_cpu [--geometry long default] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from evalharness.bench.kernel_table import random_qkv
from evalharness.bench.matmul_ceiling import (
    chunked_matmul_flops,
    torch_chunked_matmuls,
    xla_chunked_matmuls,
)
from evalharness.bench.mlflow_record import emit
from evalharness.bench.timing import time_warm
from evalharness.machine import machine_info, machine_line
from kernels.executors.dispatch import attention
from kernels.executors.xla_flash import flash_blocks
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

# name -> (token grid F x Hp x Wp, batch, heads, head_dim, tiles of b0/b3)
GEOMETRIES = {
    "long": ((21, 24, 32), 1, 2, 128, 768),
    "default": ((9, 12, 20), 2, 4, 64, 128),
}
DENSITY = 0.39
ROWS = (
    "xla_flash",
    "b0",
    "b3",
    "torch_sdpa",
    "xla_matmuls",
    "torch_matmuls",
    "dot_product_attention",
)
# Timed in rounds of their own, after the paired rows (see the module docstring).
APART = ("dot_product_attention",)
SDPA_BOUND = 1.2
IDEAL_BOUND = 1.05


def _torch_row(row: str, q: jax.Array, k: jax.Array, v: jax.Array, flash) -> Callable | None:
    """A torch row's callable (SDPA on [B, H, N, D] copies, or the chunked matmuls), or None
    when torch does not import."""
    try:
        if row == "torch_matmuls":
            return torch_chunked_matmuls(np.asarray(q), np.asarray(k), np.asarray(v), flash)
        import torch
    except ImportError:
        return None
    tq, tk, tv = (torch.from_numpy(np.array(x)).transpose(1, 2).contiguous() for x in (q, k, v))

    def call():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

    return call


def _jax_row(row: str, plan, tiles: BlockSizes, flash: BlockSizes) -> Callable:
    """A JAX row's jitted function of (q, k, v)."""
    if row == "b3":
        return jax.jit(lambda q, k, v: attention(q, k, v, plan, executor="b3"))
    if row == "b0":
        return jax.jit(lambda q, k, v: attention(q, k, v, None, executor="b0", block_sizes=tiles))
    if row == "xla_matmuls":
        return jax.jit(lambda q, k, v: xla_chunked_matmuls(q, k, v, flash))
    return jax.jit(lambda q, k, v: attention(q, k, v, None, executor=row))


def _row_flops(row: str, shape: tuple[int, int, int, int], plan, tiles: BlockSizes, flash) -> float:
    """The FLOPs a row computes: padded tiles for B0, executed tiles for B3."""
    b, n, h, d = shape
    per_pair = 4.0 * b * h * d
    if row in ("xla_matmuls", "torch_matmuls"):
        return chunked_matmul_flops(shape, flash)
    if row == "b0":  # every tile of B3's grid, padding included
        return per_pair * plan.num_q_tiles * tiles.block_q * plan.num_kv_tiles * tiles.block_kv
    if row == "b3":
        return per_pair * n * n * plan.executed_pairs_fraction
    return per_pair * n * n


def _rows(name: str, rows: tuple[str, ...]) -> tuple[dict[str, Callable[[], object]], dict]:
    """The callables of one geometry and what describes it (``info["flops"]``: per row)."""
    grid, batch, heads, head_dim, tile = GEOMETRIES[name]
    geometry = TokenGeometry(*grid)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, jnp.float32)
    q, k, v = (jnp.concatenate([x] * batch, axis=0) for x in (q, k, v))
    mask = band_for_density(geometry, DENSITY)
    tiles = BlockSizes(tile, tile)
    plan = build_plan(mask, tiles, "b3")
    flash = flash_blocks(geometry.tokens, batch, heads)
    shape = (batch, geometry.tokens, heads, head_dim)
    info = {
        "geometry": name,
        "shape": list(shape),
        "tiles": [tile, tile],
        "flash_blocks": [flash.block_q, flash.block_kv],
        "mask_density": mask.density,
        "b3_executed_pairs_fraction": plan.executed_pairs_fraction,
        "flops": {},
    }
    fns: dict[str, Callable[[], object]] = {}
    for row in rows:
        if row.startswith("torch_"):
            call = _torch_row(row, q, k, v, flash)
            if call is None:
                continue
            fns[row] = call
        else:
            fn = _jax_row(row, plan, tiles, flash)
            fns[row] = lambda fn=fn: jax.block_until_ready(fn(q, k, v))
        info["flops"][row] = _row_flops(row, shape, plan, tiles, flash)
    return fns, info


def time_geometry(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, dict]:
    """``time_warm`` over the paired rows, then over the ``APART`` rows on their own.

    Args:
        fns: name -> zero-argument callable that returns when its work is done.
        rounds: timed rounds (>= 1; else ValueError).

    Returns:
        name -> {"wall_ms": [per round], "cpu_ms": [per round], "paired": whether it ran in the
        shared rounds}, in the order of ``fns``.
    """
    paired = {name: fn for name, fn in fns.items() if name not in APART}
    apart = {name: fn for name, fn in fns.items() if name in APART}
    samples = {}
    for group, in_rounds in ((paired, True), (apart, False)):
        if group:
            for name, t in time_warm(group, rounds).items():
                wall, cpu = [1e3 * s for s in t.runs_s], [1e3 * s for s in t.cpu_s]
                samples[name] = {"wall_ms": wall, "cpu_ms": cpu, "paired": in_rounds}
    return {name: samples[name] for name in fns}


def paired_ratio(a: list[float], b: list[float]) -> dict[str, float]:
    """Median, min and max over rounds of a[i] / b[i]."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def _ratio(samples: dict[str, dict], name: str, ref: str) -> dict:
    """Paired ratio of two rows' wall times, or the ratio of medians when either ran apart."""
    a, b = samples[name], samples[ref]
    if a.get("paired", True) and b.get("paired", True):
        return paired_ratio(a["wall_ms"], b["wall_ms"])
    value = statistics.median(a["wall_ms"]) / statistics.median(b["wall_ms"])
    return {"median": value, "min": value, "max": value, "unpaired": True}


def summarize(samples: dict[str, dict], info: dict) -> dict:
    """Per-row statistics, ratios and the checks for one geometry: {"info", "rows", "checks"}.

    Args:
        samples: ``time_geometry``'s output.
        info: the geometry's description (``b3_executed_pairs_fraction`` for the ideal;
            ``flops``, when present, per row for the rate column).
    """
    rows = {}
    flops = info.get("flops", {})
    for name, s in samples.items():
        wall = s["wall_ms"]
        row = {
            "median_ms": statistics.median(wall),
            "min_ms": min(wall),
            "max_ms": max(wall),
            "cpu_median_ms": statistics.median(s["cpu_ms"]),
        }
        if name in flops and row["cpu_median_ms"] > 0:
            row["gflops_per_core"] = flops[name] / (row["cpu_median_ms"] * 1e6)
        for ref in ("torch_sdpa", "xla_flash"):
            if ref in samples and ref != name:
                row[f"vs_{ref}"] = _ratio(samples, name, ref)
        rows[name] = row
    return {"info": info, "rows": rows, "checks": _checks(rows, info, samples)}


def _checks(rows: dict[str, dict], info: dict, samples: dict[str, dict]) -> dict:
    """The dense-control checks, the matmul ceiling beside them, and B3 over B0."""
    checks = {}
    if "xla_flash" in rows and "torch_sdpa" in rows:
        ratio = rows["xla_flash"]["vs_torch_sdpa"]["median"]
        checks["xla_flash_vs_torch_sdpa"] = {"value": ratio, "ok": ratio <= SDPA_BOUND}
    if "xla_matmuls" in rows and "torch_sdpa" in rows:
        # xla_flash runs these matmuls and more: its ratio cannot fall below this one.
        floor = rows["xla_matmuls"]["vs_torch_sdpa"]["median"]
        checks["xla_matmuls_vs_torch_sdpa"] = {
            "value": floor,
            "bound_reachable": floor <= SDPA_BOUND,
        }
    if "xla_flash" in rows and "b3" in rows:
        ideal = 1.0 / info["b3_executed_pairs_fraction"]
        speedup = 1.0 / rows["b3"]["vs_xla_flash"]["median"]
        off = max(ideal / speedup, speedup / ideal)
        checks["b3_speedup_vs_xla_flash"] = {
            "value": speedup,
            "ideal": ideal,
            "off_by": off,
            "ok": off <= IDEAL_BOUND,
        }
    if "b0" in samples and "b3" in samples:
        checks["b3_speedup_vs_b0"] = {"value": _ratio(samples, "b0", "b3")["median"]}
    return checks


def _ratio_cell(row: dict, key: str) -> str:
    r = row.get(key)
    if r is None:
        return "-"
    if r.get("unpaired"):
        return f"{r['median']:.2f} (unpaired)"
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def format_table(result: dict) -> str:
    """One geometry's result as Markdown."""
    info = result["info"]
    flash = info.get("flash_blocks")
    lines = [
        f"### {info['geometry']}: [B, N, H, D] = {info['shape']}, float32, tiles "
        f"{info['tiles'][0]} x {info['tiles'][1]}, mask density {info['mask_density']:.3f}, "
        f"B3 executed pairs {info['b3_executed_pairs_fraction']:.3f}"
        + (f", xla_flash blocks {flash[0]} x {flash[1]}" if flash else ""),
        "",
        "| executor | median ms (min-max) | CPU ms | GFLOP/s per core | / torch_sdpa, paired "
        "| / xla_flash, paired |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        rate = row.get("gflops_per_core")
        lines.append(
            f"| {name} | {row['median_ms']:,.1f} ({row['min_ms']:,.1f}-{row['max_ms']:,.1f}) | "
            f"{row['cpu_median_ms']:,.0f} | {'-' if rate is None else f'{rate:,.0f}'} | "
            f"{_ratio_cell(row, 'vs_torch_sdpa')} | {_ratio_cell(row, 'vs_xla_flash')} |"
        )
    lines.append("")
    for name, check in result["checks"].items():
        text = ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in check.items()
        )
        lines.append(f"- {name}: {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalharness.bench.dense_cpu", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--geometry", nargs="+", choices=sorted(GEOMETRIES), default=list(GEOMETRIES)
    )
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    results = []
    for name in args.geometry:
        fns, info = _rows(name, tuple(args.rows))
        results.append(summarize(time_geometry(fns, args.rounds), info))
    machine = machine_info()
    tables = "".join(f"\n\n{format_table(result)}" for result in results)
    emit(
        args,
        {"machine": machine, "rounds": args.rounds, "results": results},
        f"{machine_line(machine)}; {args.rounds} interleaved rounds{tables}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
