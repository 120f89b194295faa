"""``python -m evalharness.bench.weights_draw``: what ``model.checkpoint=random`` pays to draw a
preset's weights, part by part.

Usage:
    python -m evalharness.bench.weights_draw --model wan2.1-t2v-1.3b [--old] [--layers N]
        [--scan-layers auto|true|false] [--dtype bfloat16|float32] [--seed S] [--json PATH]

Rows, each the first call in this process (compile included: what a run pays), wall-clock seconds
to ``jax.block_until_ready`` with the process CPU seconds beside them (the machine may be shared):

- ``transformer``: ``models.random_weights.draw_transformer`` (one block's draw scanned over the
  layers), the program ``random_transformer`` runs, split into trace (``jit(...).lower``),
  compile and run.
- ``transformer_old`` (with ``--old``): the previous recipe, ``WanTransformer`` built under
  ``jit`` with ``nnx.Rngs(seed)`` (``reference_random_transformer``'s program), split the same
  way; the two states are then compared bit for bit (``identical``).
- ``vae``: ``random_vae`` (drawn on the host with NumPy, then copied to the device).
- ``prompt_encoder``: the small seeded UMT5 that ``random_prompt_encoder`` builds when a prompt
  first misses the cache (built the same way, without encoding).

Leave ``JAX_COMPILATION_CACHE_DIR`` unset: a persistent-cache hit would hide the compile.

Measured on a CPU (2 shared cores, load about 5: wall seconds are noisy, CPU seconds less so),
Wan 1.3B's widths in bfloat16, weights bit-identical in every row; "run" there is the CPU drawing
1.4 B normals, which an accelerator does in about a second:

| blocks | form | recipe | trace s | compile s | run s | total s | CPU s | peak RSS |
|---|---|---|---|---|---|---|---|---|
| 2 | unrolled | old | 0.76 | 12.5 | 4.0 | 17.2 | 9.7 | |
| 2 | unrolled | new | 1.10 | 14.5 | 4.4 | 20.0 | 10.3 | |
| 4 | unrolled | old | 0.56 | 9.8 | 7.2 | 17.5 | 13.4 | |
| 4 | unrolled | new | 0.79 | 11.3 | 4.4 | 16.4 | 12.4 | |
| 2 | scanned | old | 0.67 | 8.2 | 4.2 | 13.0 | 8.8 | |
| 2 | scanned | new | 0.74 | 8.8 | 3.5 | 13.0 | 8.9 | |
| 4 | scanned | old | 1.06 | 12.0 | 6.7 | 19.8 | 13.4 | |
| 4 | scanned | new | 0.76 | 10.1 | 6.6 | 17.5 | 11.9 | |
| 30 | unrolled | old | 19.1 | 81.4 | 69.0 | 169.5 | 103.4 | 14.4 GB |
| 30 | unrolled | new | 1.13 | 19.6 | 46.2 | 67.0 | 47.1 | 6.7 GB |
| 30 | scanned | old | 13.8 | 77.3 | 83.4 | 174.5 | 115.7 | |
| 30 | scanned | new | 0.86 | 12.3 | 62.9 | 76.0 | 48.3 | |

At 2 to 4 blocks both programs are mostly the same ~30 distinct draws (compile about 6 CPU
seconds either way); at 30 the old trace (quadratic in the draws) and compile (one copy of the
block's draw per block) dominate. The Wan VAE took 2.5 to 3.7 s (1.6 to 2.4 CPU s) and the prompt
encoder's UMT5 0.2 to 0.3 s on the same machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.assembly import platform_choices
from evalharness.formatting import markdown_table
from models.config import get_transformer_config
from models.random_weights import draw_transformer, random_text_config, random_vae
from models.tiny_components import tiny_umt5_encoder
from models.transformer import WanTransformer

_COLUMNS = (
    ("part", "part", "{}"),
    ("trace s", "trace_s", "{:.2f}"),
    ("compile s", "compile_s", "{:.2f}"),
    ("run s", "run_s", "{:.2f}"),
    ("total s", "total_s", "{:.2f}"),
    ("CPU s", "cpu_s", "{:.2f}"),
)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall-clock seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def time_program(part: str, fn: Callable[..., Any], *args: Any) -> tuple[Any, dict[str, Any]]:
    """Traces, compiles and runs ``jax.jit(fn)(*args)``, each timed apart.

    Returns:
        The output (ready) and the row ``{part, trace_s, compile_s, run_s, total_s, cpu_s}``.
    """
    lowered, trace_s, trace_cpu = _timed(lambda: jax.jit(fn).lower(*args))
    compiled, compile_s, compile_cpu = _timed(lowered.compile)
    out, run_s, run_cpu = _timed(lambda: jax.block_until_ready(compiled(*args)))
    row = {"part": part, "trace_s": trace_s, "compile_s": compile_s, "run_s": run_s}
    row["total_s"] = trace_s + compile_s + run_s
    row["cpu_s"] = trace_cpu + compile_cpu + run_cpu
    return out, row


def time_build(part: str, build: Callable[[], nnx.Module]) -> dict[str, Any]:
    """Seconds of ``build()`` until every parameter is ready (an eager build: no split)."""
    _, total_s, cpu_s = _timed(lambda: jax.block_until_ready(nnx.state(build())))
    return {"part": part, "total_s": total_s, "cpu_s": cpu_s}


def bit_identical(a: nnx.State, b: nnx.State) -> bool:
    """Whether two states hold the same leaves bit for bit (compared on the device)."""
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        bits = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize]
        same = jnp.array_equal(
            jax.lax.bitcast_convert_type(x, bits), jax.lax.bitcast_convert_type(y, bits)
        )
        if not bool(same):
            return False
    return True


def measure(
    model: str,
    *,
    seed: int = 0,
    layers: int | None = None,
    scan_layers: bool,
    dtype: str = "bfloat16",
    old: bool = False,
) -> dict[str, Any]:
    """Times every part of a preset's random draw.

    Args:
        model: preset name (``wan2.1-t2v-1.3b``).
        seed: ``model.seed``.
        layers: blocks (None: the preset's own depth).
        scan_layers: the scanned form of the transformer.
        dtype: the transformer's weights and compute dtype.
        old: also time the previous recipe and compare the weights.

    Returns:
        ``{model, layers, scan_layers, dtype, device, rows, identical}`` (``identical`` None
        without ``old``).
    """
    config = get_transformer_config(model)
    if layers is not None:
        config = dataclasses.replace(config, num_layers=layers)
    kw = {"param_dtype": jnp.dtype(dtype), "dtype": jnp.dtype(dtype), "scan_layers": scan_layers}
    new_state, new_row = time_program(
        "transformer",
        lambda key: nnx.state(draw_transformer(config, key, **kw)),
        jax.random.key(seed),
    )
    rows = [new_row]
    identical = None
    if old:
        old_state, old_row = time_program(
            "transformer_old",
            lambda: nnx.state(WanTransformer(config, rngs=nnx.Rngs(seed), **kw)),
        )
        rows.append(old_row)
        identical = bit_identical(new_state, old_state)
        del old_state
    del new_state
    rows.append(time_build("vae", lambda: random_vae(model, seed)))
    text = random_text_config(config.text_dim)
    rows.append(time_build("prompt_encoder", lambda: tiny_umt5_encoder(seed, config=text)))
    return {
        "model": model,
        "layers": config.num_layers,
        "scan_layers": scan_layers,
        "dtype": dtype,
        "device": f"{jax.devices()[0].platform}: {jax.devices()[0].device_kind}",
        "rows": rows,
        "identical": identical,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="wan2.1-t2v-1.3b", help="preset name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=None, help="blocks (default: the preset's)")
    parser.add_argument("--scan-layers", default="auto", choices=("auto", "true", "false"))
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--old", action="store_true", help="also time the previous recipe")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    args = parser.parse_args(argv)
    scan = args.scan_layers if args.scan_layers == "auto" else args.scan_layers == "true"
    result = measure(
        args.model,
        seed=args.seed,
        layers=args.layers,
        scan_layers=platform_choices.scan_layers_for(scan, platform_choices.host_platform()),
        dtype=args.dtype,
        old=args.old,
    )
    form = "scanned" if result["scan_layers"] else "unrolled"
    print(
        f"{result['model']}, {result['layers']} blocks {form}, {result['dtype']}, "
        f"{result['device']}"
    )
    print(markdown_table(result["rows"], _COLUMNS))
    if result["identical"] is not None:
        print(f"new and old transformer weights bit-identical: {result['identical']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
