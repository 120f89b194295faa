"""``python -m evalharness.bench.step_parts``: where the time of one sparse transformer block goes.

Takes the run's configuration (``model``, ``resolution``, ``schedule``, ``dtype``, ``kernel``,
guidance) and times, side by side in one process (round-robin rounds, medians), one transformer
block of the model at the run's shapes with random weights, and the parts of its sparse
self-attention call:

- ``dense block``: the block with the dense control (``kernel.dense_executor``) as self-attention;
- ``sparse block``: the block at a sparse (step, layer) cell of the schedule's policy;
- ``block without self-attention``: the block with a free self-attention (``v`` returned as is):
  the dense remainder both arms share (projections, norms, RoPE, cross-attention, FFN);
- ``dense attention``: the dense control alone on q, k, v;
- ``sparse attention``: the sparse branch alone (routing, layout in, band kernel, layout out);
- its parts: ``routing``, ``layout in``, ``band kernel``, ``layout out`` (a static mask,
  ``schedule=sta`` or ``radial``, has no routing, and its layout parts are the change into and
  out of the mask's token order: STA's tiles; Radial has none); and the routed heads' layout change
  as a gather by the permutation index (``layout in (gather)``, ``layout out (gather)``), the
  plain definition the transposes replace, for comparison, alone and inside the block
  (``sparse block (gather layout)``, where XLA fuses it with what surrounds it);
- on ``pallas_tpu`` with operands read in place (``kernels.executors.pallas_tpu_operands``):
  ``sparse block (heads-leading)`` and ``band kernel (heads-leading)``, the same with the
  kernel's operands copied heads-leading, so the two layouts are compared in one process;
- where the backend brings its own cross-attention (``pallas_tpu``: every block, dense and sparse,
  runs ``kernels.executors.pallas_tpu_cross``): ``dense block (model's cross-attention)``, the
  dense block with ``models.attention.cross_attention`` instead, and the two cross-attentions
  alone on the block's shapes (``cross-attention (run's)``, ``cross-attention (model's)``).

Each part's share is of the sparse block (dense parts: of the dense block). The ideal sparse block
is the dense block with its dense attention replaced by the band kernel alone
(``dense block - dense attention + band kernel``); ``of ideal`` is that over the measured sparse
block, and the remainder (``sparse block - ideal``) is what routing and the layout changes cost.

With ``--profile``, the dense and sparse blocks are then traced (``jax.profiler``) and each
one's device time is printed per kind of XLA operation, with the sparse block's slowest
operations (``evalharness.bench.op_profile``): the copies and pads that the timings above only
show as the sparse block's overhead.

Usage:
    python -m evalharness.bench.step_parts model=wan2.1-t2v-1.3b resolution=720p \\
        schedule=aggressive dtype=bfloat16 warm_runs=5 [--profile [--trace-dir DIR]] [--json]
        [--json-out FILE]
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from evalharness.assembly import dense_attend, kernel_options
from evalharness.bench.mlflow_record import emit
from evalharness.bench.op_profile import profile_ops
from evalharness.bench.run_config import AttentionCall, bench_parser, config_or_exit
from evalharness.bench.static_parts import static_attention_fns
from evalharness.bench.timing import time_warm_ms
from evalharness.config import EvalConfig
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info, machine_line
from kernels.executors.pallas_tpu_operands import reads_in_place
from kernels.masks.layouts import (
    from_head_layouts,
    inverse_temporal_permutation,
    temporal_permutation,
    to_head_layouts,
)
from kernels.policy.attention_policy import AttentionPolicy
from kernels.policy.static_policy import make_policy
from models.attention import cross_attention
from models.rope import rope_tables
from models.transformer import WanTransformerBlock

BLOCK_PARTS = ("dense block", "sparse block", "block without self-attention")
ATTENTION_PARTS = ("dense attention", "sparse attention")
SPARSE_PARTS = ("routing", "layout in", "band kernel", "layout out")
GATHER_PARTS = ("layout in (gather)", "layout out (gather)", "sparse block (gather layout)")
HEADS_LEADING_PARTS = ("sparse block (heads-leading)", "band kernel (heads-leading)")
# Where the run's backend brings its own cross-attention (``cross_attend_for``): the dense block
# with the model's own instead, and the two cross-attentions alone on the block's text shapes.
CROSS_PARTS = (
    "dense block (model's cross-attention)",
    "cross-attention (run's)",
    "cross-attention (model's)",
)
PROFILED_PARTS = ("dense block", "sparse block", HEADS_LEADING_PARTS[0])
PROFILED_CALLS = 3
PROFILE_TOP_OPS = 15
MIN_SHOWN_MS = 0.01  # kinds of operation below this in every block are left out of the table
COLUMNS = (
    ("part", "part", "{}"),
    ("median ms (min-max)", "range_ms", "{}"),
    ("share", "share", "{:.1%}"),
)


def _policy(cfg: EvalConfig, call: AttentionCall, in_place: bool | None = None) -> AttentionPolicy:
    """The sparse arm's policy, as the run builds it (its mask, tiles, dense control, options:
    a routed schedule's ``AttentionPolicy``, a static mask's ``StaticMaskPolicy``); ``in_place``
    overrides how the Pallas TPU kernel holds its operands."""
    return make_policy(
        cfg.schedule,
        call.geometry,
        num_steps=cfg.steps,
        num_layers=call.model.num_layers,
        backend=cfg.kernel.backend.value,
        block_sizes=call.block_sizes,
        dense_attend=dense_attend(cfg, cfg.kernel.dense_executor),
        seed=cfg.seed,
        options=dataclasses.replace(kernel_options(cfg), in_place=in_place),
    )


def _heads_leading_policy(cfg: EvalConfig, call: AttentionCall) -> AttentionPolicy | None:
    """The policy with the kernel's operands copied heads-leading, where the run's own reads
    them in place (``pallas_tpu``, head_dim a multiple of 128); None elsewhere."""
    if cfg.kernel.backend.value != "pallas_tpu" or not reads_in_place(call.heads, call.head_dim):
        return None
    return _policy(cfg, call, in_place=False)


def _gather(x: jax.Array, index: Any, temporal: jax.Array) -> jax.Array:
    """The layout change as a gather by a permutation index, per (batch, head)."""
    moved = jnp.take(x, jnp.asarray(index), axis=1)
    return jnp.where(temporal[:, None, :, None], moved, x)


def _routed(policy: AttentionPolicy, q, k, v, *, step, layer) -> jax.Array:
    """Routing's temporal flags, bool [batch, heads], for the sparse cell (step, layer)."""
    return policy.route(q, k, v, step=step, layer=layer).temporal


def _sparse_by_gather(policy: AttentionPolicy, q, k, v, *, step, layer) -> jax.Array:
    """The sparse branch with the layout change as a gather by the permutation index: equal to
    ``policy.sparse_branch`` (a permutation either way), timed to compare the two in a block."""
    temporal = _routed(policy, q, k, v, step=step, layer=layer)
    perm = temporal_permutation(policy.geometry)
    moved = [_gather(x, perm, temporal) for x in (q, k, v)]
    out = policy.execute_band(*moved)
    return _gather(out, inverse_temporal_permutation(policy.geometry), temporal)


def _inputs(call: AttentionCall) -> dict[str, jax.Array]:
    """Random q, k, v [B, N, H, D], block activations [B, N, dim], text [B, L, dim], modulation
    [B, 6, dim], the text's keys and values [B, L, H, D], and half the heads temporal in each
    batch row (both halves differently)."""
    model, g, dtype = call.model, call.geometry, call.dtype
    keys = jax.random.split(jax.random.key(call.cfg.seed), 8)
    qkv = (call.batch, g.tokens, call.heads, call.head_dim)
    q, k, v = (jax.random.normal(keys[i], qkv, dtype) for i in range(3))
    text_kv = (call.batch, model.text_len, call.heads, call.head_dim)
    heads = jnp.arange(call.heads)
    temporal = jnp.stack([heads % 2 == 0, heads % 2 == 1][: call.batch])
    return {
        "q": q,
        "k": k,
        "v": v,
        "temporal": temporal,
        "x": jax.random.normal(keys[3], (call.batch, g.tokens, model.dim), dtype),
        "text": jax.random.normal(keys[4], (call.batch, model.text_len, model.dim), dtype),
        "modulation": jax.random.normal(keys[5], (call.batch, 6, model.dim), jnp.float32),
        "text_k": jax.random.normal(keys[6], text_kv, dtype),
        "text_v": jax.random.normal(keys[7], text_kv, dtype),
    }


def _block_fns(
    call: AttentionCall, policy: AttentionPolicy, x: dict, copied: AttentionPolicy | None
) -> dict[str, Callable]:
    """The block timings: dense control, sparse cell, free self-attention (and the sparse cell
    with the ``copied`` policy's heads-leading operands)."""
    model, g = call.model, call.geometry
    block = WanTransformerBlock(
        model, dtype=call.dtype, param_dtype=call.dtype, rngs=nnx.Rngs(call.cfg.model.seed)
    )
    graph, state = nnx.split(block)
    rope = rope_tables(
        (g.frames, g.height, g.width), model.attention_head_dim, max_seq_len=model.rope_max_seq_len
    )
    step, layer = jnp.int32(call.cfg.steps - 1), model.num_layers - 1
    attends = {
        "dense block": policy.dense_attend,
        "sparse block": lambda q, k, v, **_: policy.sparse_branch(q, k, v, step=step, layer=layer),
        "block without self-attention": lambda q, k, v, **_: v,
    }
    if call.cfg.schedule.routes:  # the gather form of the routed heads' layout change
        attends[GATHER_PARTS[2]] = lambda q, k, v, **_: _sparse_by_gather(
            policy, q, k, v, step=step, layer=layer
        )
    if copied is not None:
        attends[HEADS_LEADING_PARTS[0]] = lambda q, k, v, **_: copied.sparse_branch(
            q, k, v, step=step, layer=layer
        )

    def make(attend: Callable, cross: bool = True) -> Callable:
        # Every block runs the run's cross-attention, as the policy's own attend carries it.
        if cross and policy.cross_attend is not None:
            attend.cross_attend = policy.cross_attend

        @jax.jit
        def run(state, h, text, modulation):
            module = nnx.merge(graph, state)
            return module(h, text, modulation, rope, attend=attend, step=step, layer=layer)

        return functools.partial(run, state, x["x"], x["text"], x["modulation"])

    fns = {name: make(attend) for name, attend in attends.items()}
    if policy.cross_attend is not None:
        fns[CROSS_PARTS[0]] = make(lambda q, k, v, **_: policy.dense_attend(q, k, v), cross=False)
    return fns


def _attention_fns(
    call: AttentionCall, policy: AttentionPolicy, x: dict, copied: AttentionPolicy | None
) -> dict[str, Callable]:
    """Dense and sparse attention alone, the sparse call's parts, the gather layouts (and the
    band kernel with the ``copied`` policy's heads-leading operands); a static mask's own parts
    (``evalharness.bench.static_parts``)."""
    g, q, k, v, temporal = call.geometry, x["q"], x["k"], x["v"], x["temporal"]
    step, layer = jnp.int32(call.cfg.steps - 1), call.model.num_layers - 1
    if not call.cfg.schedule.routes:
        return static_attention_fns(policy, q, k, v, step=step, layer=layer)
    moved = [to_head_layouts(t, g, temporal) for t in (q, k, v)]
    perm, inv = temporal_permutation(g), inverse_temporal_permutation(g)

    routing = functools.partial(_routed, policy, step=step, layer=layer)
    jitted = {
        "dense attention": (jax.jit(lambda q, k, v: policy.dense_attend(q, k, v)), (q, k, v)),
        "sparse attention": (
            jax.jit(lambda q, k, v: policy.sparse_branch(q, k, v, step=step, layer=layer)),
            (q, k, v),
        ),
        "routing": (jax.jit(routing), (q, k, v)),
        "layout in": (
            jax.jit(lambda q, k, v, t: [to_head_layouts(a, g, t) for a in (q, k, v)]),
            (q, k, v, temporal),
        ),
        "band kernel": (jax.jit(policy.execute_band), tuple(moved)),
        "layout out": (jax.jit(lambda o, t: from_head_layouts(o, g, t)), (q, temporal)),
        "layout in (gather)": (
            jax.jit(lambda q, k, v, t: [_gather(a, perm, t) for a in (q, k, v)]),
            (q, k, v, temporal),
        ),
        "layout out (gather)": (jax.jit(lambda o, t: _gather(o, inv, t)), (q, temporal)),
    }
    if copied is not None:
        jitted[HEADS_LEADING_PARTS[1]] = (jax.jit(copied.execute_band), tuple(moved))
    if policy.cross_attend is not None:
        text_kv = (x["text_k"], x["text_v"])
        jitted[CROSS_PARTS[1]] = (jax.jit(policy.cross_attend), (q, *text_kv))
        jitted[CROSS_PARTS[2]] = (jax.jit(cross_attention), (q, *text_kv))
    return {name: functools.partial(fn, *args) for name, (fn, args) in jitted.items()}


def run(cfg: EvalConfig, *, profile: bool = False, trace_dir: str | None = None) -> dict:
    """Times every part (module docstring) round-robin; returns the settings and the parts (and,
    with ``profile``, the blocks' operation profiles, traces kept under ``trace_dir``)."""
    call = AttentionCall(cfg)
    if not cfg.schedule.sparse:
        raise ValueError(f"schedule={cfg.schedule.name} is dense; name a sparse schedule")
    policy, copied = _policy(cfg, call), _heads_leading_policy(cfg, call)
    x = _inputs(call)
    fns = {**_block_fns(call, policy, x, copied), **_attention_fns(call, policy, x, copied)}
    print(f"compiling and timing {len(fns)} parts, {cfg.warm_runs} rounds ...", file=sys.stderr)
    times = time_warm_ms(fns, cfg.warm_runs)
    g, tiles = call.geometry, call.block_sizes
    return {
        "machine": machine_info(),
        "model": f"{cfg.model.name} (random weights, one block)",
        "resolution": cfg.resolution.name,
        "tokens": g.tokens,
        "batch": call.batch,
        "heads": call.heads,
        "dtype": cfg.dtype.value,
        "schedule": cfg.schedule.name,
        "sparse_density": cfg.schedule.sparse_density(g, tiles),
        "block_sizes": [tiles.block_q, tiles.block_kv],
        "backend": cfg.kernel.backend.value,
        "dense_executor": cfg.kernel.dense_executor.value,
        "runs": cfg.warm_runs,
        "parts": times,
        "summary": summarize(times),
        **(_profiles(fns, trace_dir) if profile else {}),
    }


def _profiles(fns: dict[str, Callable], trace_dir: str | None) -> dict:
    """``{"profile": ...}`` of the blocks in ``PROFILED_PARTS``, or ``{"profile_error": ...}``
    when the trace holds nothing to read: the timings already taken are kept either way."""
    traced = {name: fns[name] for name in PROFILED_PARTS if name in fns}
    print(f"tracing {len(traced)} blocks ...", file=sys.stderr)
    try:
        profiles = profile_ops(traced, PROFILED_CALLS, trace_dir)
    except ValueError as error:
        return {"profile_error": str(error)}
    return {"profile": {name: p.to_json() for name, p in profiles.items()}}


def summarize(parts: dict[str, dict]) -> dict[str, float]:
    """The ideal sparse block and what the measured one spends beyond it, in ms.

    Args:
        parts: part name -> {"median_ms", ...} (``run``'s timings).

    Returns:
        ``ideal_sparse_block_ms`` (dense block - dense attention + band kernel),
        ``fraction_of_ideal`` (ideal / sparse block), ``overhead_ms`` (sparse block - ideal),
        ``ideal_speedup`` and ``block_speedup`` (dense block over the ideal and the measured one);
        with the heads-leading parts, ``in_place_saves_ms``: the sparse block with heads-leading
        operands minus the block as run (positive: in place is faster); with the gather block,
        ``transpose_saves_ms``: the block with the gather layout minus the block as run
        (positive: the transpose is faster); where the run brings its own cross-attention,
        ``cross_attention_saves_ms``: the dense block with the model's cross-attention minus the
        dense block as run (positive: the run's is faster).
    """
    ms = {name: part["median_ms"] for name, part in parts.items()}
    ideal = ms["dense block"] - ms["dense attention"] + ms["band kernel"]
    summary = {
        "ideal_sparse_block_ms": ideal,
        "fraction_of_ideal": ideal / ms["sparse block"],
        "overhead_ms": ms["sparse block"] - ideal,
        "ideal_speedup": ms["dense block"] / ideal,
        "block_speedup": ms["dense block"] / ms["sparse block"],
    }
    if HEADS_LEADING_PARTS[0] in ms:
        summary["in_place_saves_ms"] = ms[HEADS_LEADING_PARTS[0]] - ms["sparse block"]
    if GATHER_PARTS[2] in ms:
        summary["transpose_saves_ms"] = ms[GATHER_PARTS[2]] - ms["sparse block"]
    if CROSS_PARTS[0] in ms:
        summary["cross_attention_saves_ms"] = ms[CROSS_PARTS[0]] - ms["dense block"]
    return summary


def format_table(result: dict) -> str:
    """The parts as a markdown table, shares of their block, under a line saying what ran."""
    parts = result["parts"]
    rows = []
    for group, whole in (
        (BLOCK_PARTS, None),
        (("dense attention", *CROSS_PARTS), "dense block"),
        (("sparse attention", *SPARSE_PARTS, *GATHER_PARTS, *HEADS_LEADING_PARTS), "sparse block"),
    ):
        for name in (n for n in group if n in parts):
            part = parts[name]
            rows.append(
                {
                    "part": name,
                    "range_ms": f"{part['median_ms']:.2f} ({part['min_ms']:.2f}-{part['max_ms']:.2f})",
                    "share": part["median_ms"] / parts[whole]["median_ms"] if whole else None,
                }
            )
    s = result["summary"]
    title = (
        f"{result['model']}, {result['resolution']} ({result['tokens']:,} tokens), batch "
        f"{result['batch']}, {result['heads']} heads, {result['dtype']}, schedule "
        f"{result['schedule']} (kept {result['sparse_density']:.4f}), {result['backend']} "
        f"{result['block_sizes'][0]} x {result['block_sizes'][1]}, dense "
        f"{result['dense_executor']}, median of {result['runs']} interleaved rounds\n\n"
    )
    footer = (
        f"\n\nideal sparse block {s['ideal_sparse_block_ms']:.2f} ms (dense block - dense "
        f"attention + band kernel): measured at {s['fraction_of_ideal']:.1%} of ideal, "
        f"{s['overhead_ms']:.2f} ms over it; block speedup {s['block_speedup']:.2f}x of an "
        f"ideal {s['ideal_speedup']:.2f}x\n"
    )
    if "transpose_saves_ms" in s:
        footer += (
            f"the layout change by transpose saves {s['transpose_saves_ms']:.2f} ms a sparse block "
            "against the gather\n"
        )
    if "cross_attention_saves_ms" in s:
        footer += (
            f"the run's cross-attention saves {s['cross_attention_saves_ms']:.2f} ms a block "
            "against the model's own (both arms run it)\n"
        )
    if "in_place_saves_ms" in s:
        footer += (
            f"operands in place save {s['in_place_saves_ms']:.2f} ms a sparse block against "
            "heads-leading copies\n"
        )
    table = title + markdown_table(rows, COLUMNS) + footer
    if "profile" in result:
        table += "\n" + format_profile(result["profile"])
    elif "profile_error" in result:
        table += f"\nno profile: {result['profile_error']}\n"
    return table + machine_line(result["machine"]) + "\n"


def format_profile(profile: dict[str, dict]) -> str:
    """The traced blocks' device ms per kind of operation side by side, then the sparse block's
    slowest operations."""
    names = list(profile)
    kinds = list(dict.fromkeys(kind for name in names for kind in profile[name]["kinds_ms"]))
    columns = [("device ms per call", "kind", "{}")] + [(n, n, "{:.2f}") for n in names]
    rows = [
        {"kind": kind, **{n: profile[n]["kinds_ms"].get(kind, 0.0) for n in names}}
        for kind in kinds
    ]
    rows = [row for row in rows if max(row[n] for n in names) >= MIN_SHOWN_MS]
    total = "all operations (a while loop's body counted once)"
    rows.append({"kind": total, **{n: profile[n]["total_ms"] for n in names}})
    text = markdown_table(rows, columns) + "\n"
    sparse = profile.get("sparse block")
    if sparse:
        top = sparse["ops"][:PROFILE_TOP_OPS]
        op_columns = (
            ("sparse block's slowest", "op", "{}"),
            ("ms", "ms", "{:.2f}"),
            ("runs", "count", "{:g}"),
        )
        text += "\n" + markdown_table(top, op_columns) + "\n"
    return text


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = bench_parser(
        "evalharness.bench.step_parts",
        __doc__,
        "model=wan2.1-t2v-1.3b resolution=720p schedule=aggressive dtype=bfloat16",
    )
    parser.add_argument("--json-out", help="also write the JSON object to this path")
    parser.add_argument(
        "--profile", action="store_true", help="also trace the blocks: device time per operation"
    )
    parser.add_argument("--trace-dir", help="keep the --profile traces here (default: discarded)")
    args = parser.parse_intermixed_args(argv)
    if args.trace_dir and not args.profile:
        parser.error("--trace-dir keeps --profile's traces: add --profile")
    cfg = config_or_exit(parser, args.overrides, median=True)
    try:
        result = run(cfg, profile=args.profile, trace_dir=args.trace_dir)
    except ValueError as error:
        parser.error(str(error))
    emit(args, result, format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
