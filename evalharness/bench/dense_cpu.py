"""``python -m evalharness.bench.dense_cpu``: is our CPU dense control as fast as PyTorch's?

Times, round-robin in one process, the CPU's dense executors beside the sparse one on two
geometries, and prints one table per geometry:

- "issue": 16,128 tokens (21 x 24 x 32), 2 heads x 128, float32, batch 1, the band+sink mask at
  density 0.39 on 768 x 768 tiles (the kernel benchmark's default geometry);
- "default": the default job's attention call, 2,160 tokens (9 x 12 x 20), 4 heads x 64, float32,
  batch 2 (the guided pair), the same mask on 128 x 128 tiles (the CPU's auto tiles).

Rows: "xla_flash" (our CPU dense control, ``kernels.executors.xla_flash``), "b0" (the block-sparse
scan over every tile, ``kernels.executors.xla_blocksparse``), "dot_product_attention" (the CPU's
noise-floor control, XLA einsum), "b3" (the sparse kernel), and "torch_sdpa"
(``torch.nn.functional.scaled_dot_product_attention``, the outside reference) when torch imports.

Ratios are paired: each round runs every row once, and a ratio's median is taken over the rounds'
ratios, so drift on a shared machine cancels. The checks of issue 26: xla_flash / torch_sdpa
<= 1.2 at both geometries; B3's speedup over xla_flash within 1.05x of the ideal over executed
pairs (1 / executed-pairs fraction of B3's plan) at the "issue" geometry.

Usage:
    python -m evalharness.bench.dense_cpu [--geometry issue default] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from evalharness.bench.inputs import random_qkv
from evalharness.bench.machine import machine_info
from kernels.executors.dispatch import attention
from kernels.masks.band import band_for_density
from kernels.masks.geometry import TokenGeometry
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan

# name -> (token grid F x Hp x Wp, batch, heads, head_dim, tiles of b0/b3)
GEOMETRIES = {
    "issue": ((21, 24, 32), 1, 2, 128, 768),
    "default": ((9, 12, 20), 2, 4, 64, 128),
}
DENSITY = 0.39
ROWS = ("xla_flash", "b0", "dot_product_attention", "b3", "torch_sdpa")
SDPA_BOUND = 1.2
IDEAL_BOUND = 1.05


def _torch_sdpa(q: jax.Array, k: jax.Array, v: jax.Array) -> Callable[[], object] | None:
    """torch's SDPA on the same q, k, v ([B, H, N, D] copies), or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    tq, tk, tv = (torch.from_numpy(np.array(x)).transpose(1, 2).contiguous() for x in (q, k, v))

    def call():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

    return call


def _rows(name: str, rows: tuple[str, ...]) -> tuple[dict[str, Callable[[], object]], dict]:
    """The callables of one geometry and what describes it."""
    grid, batch, heads, head_dim, tile = GEOMETRIES[name]
    geometry = TokenGeometry(*grid)
    q, k, v = random_qkv(geometry.tokens, heads, head_dim, jnp.float32)
    q, k, v = (jnp.concatenate([x] * batch, axis=0) for x in (q, k, v))
    mask = band_for_density(geometry, DENSITY)
    tiles = BlockSizes(tile, tile)
    plan = build_plan(mask, tiles, "b3")
    info = {
        "geometry": name,
        "shape": [batch, geometry.tokens, heads, head_dim],
        "tiles": [tile, tile],
        "mask_density": mask.density,
        "b3_executed_pairs_fraction": plan.executed_pairs_fraction,
    }
    fns: dict[str, Callable[[], object]] = {}
    for row in rows:
        if row == "torch_sdpa":
            call = _torch_sdpa(q, k, v)
            if call is not None:
                fns[row] = call
            continue
        if row == "b3":
            fn = jax.jit(lambda q, k, v: attention(q, k, v, plan, variant="b3"))
        elif row == "b0":
            fn = jax.jit(lambda q, k, v: attention(q, k, v, None, variant="b0", block_sizes=tiles))
        else:
            fn = jax.jit(lambda q, k, v, row=row: attention(q, k, v, None, variant=row))
        fns[row] = lambda fn=fn: jax.block_until_ready(fn(q, k, v))
    return fns, info


def time_rounds(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, dict]:
    """Warms every callable up, then times ``rounds`` rounds of each, round-robin.

    Args:
        fns: name -> zero-argument callable that returns when its work is done.
        rounds: timed rounds (>= 1).

    Returns:
        name -> {"wall_ms": [per round], "cpu_ms": [per round]}.
    """
    if rounds < 1:
        raise ValueError(f"rounds={rounds}; need at least 1")
    for fn in fns.values():
        fn()
    samples = {name: {"wall_ms": [], "cpu_ms": []} for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            samples[name]["wall_ms"].append((time.perf_counter() - w0) * 1e3)
            samples[name]["cpu_ms"].append((time.process_time() - c0) * 1e3)
    return samples


def paired_ratio(a: list[float], b: list[float]) -> dict[str, float]:
    """Median, min and max over rounds of a[i] / b[i]."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def summarize(samples: dict[str, dict], info: dict) -> dict:
    """Per-row statistics, paired ratios and the issue's checks for one geometry.

    Args:
        samples: ``time_rounds``'s output.
        info: the geometry's description (``b3_executed_pairs_fraction`` used for the ideal).

    Returns:
        {"info", "rows": {name: {...}}, "checks": {...}}.
    """
    rows = {}
    for name, s in samples.items():
        wall = s["wall_ms"]
        row = {
            "median_ms": statistics.median(wall),
            "min_ms": min(wall),
            "max_ms": max(wall),
            "cpu_median_ms": statistics.median(s["cpu_ms"]),
        }
        for ref in ("torch_sdpa", "xla_flash"):
            if ref in samples and ref != name:
                row[f"vs_{ref}"] = paired_ratio(wall, samples[ref]["wall_ms"])
        rows[name] = row
    checks = {}
    if "xla_flash" in rows and "torch_sdpa" in rows:
        ratio = rows["xla_flash"]["vs_torch_sdpa"]["median"]
        checks["xla_flash_vs_torch_sdpa"] = {"value": ratio, "ok": ratio <= SDPA_BOUND}
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
    if "b0" in rows and "b3" in rows:
        b0_over_b3 = paired_ratio(samples["b0"]["wall_ms"], samples["b3"]["wall_ms"])
        checks["b3_speedup_vs_b0"] = {"value": b0_over_b3["median"]}
    return {"info": info, "rows": rows, "checks": checks}


def _ratio_cell(row: dict, key: str) -> str:
    r = row.get(key)
    return "-" if r is None else f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def format_table(result: dict) -> str:
    """One geometry's result as Markdown."""
    info = result["info"]
    lines = [
        f"### {info['geometry']}: [B, N, H, D] = {info['shape']}, float32, tiles "
        f"{info['tiles'][0]} x {info['tiles'][1]}, mask density {info['mask_density']:.3f}, "
        f"B3 executed pairs {info['b3_executed_pairs_fraction']:.3f}",
        "",
        "| executor | median ms (min-max) | CPU ms | / torch_sdpa, paired | / xla_flash, paired |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"| {name} | {row['median_ms']:,.1f} ({row['min_ms']:,.1f}-{row['max_ms']:,.1f}) | "
            f"{row['cpu_median_ms']:,.0f} | {_ratio_cell(row, 'vs_torch_sdpa')} | "
            f"{_ratio_cell(row, 'vs_xla_flash')} |"
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
        results.append(summarize(time_rounds(fns, args.rounds), info))
    machine = machine_info()
    if args.json:
        print(json.dumps({"machine": machine, "rounds": args.rounds, "results": results}, indent=2))
        return 0
    print(
        f"machine: {machine['processor']}, {machine['cpu_count']} cores, {machine['platform']}, "
        f"jax {machine['jax_version']}; {args.rounds} interleaved rounds"
    )
    for result in results:
        print()
        print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
