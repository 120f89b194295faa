"""Dense controls: the outside flash kernels per platform, and the rule that picks them.

A dense control is a dense attention executor the sparse runs are compared against. At real sizes
(Wan 2.1 14B at 720p: 75,600 tokens, 40 heads x 128, batch 2) ``jax.nn.dot_product_attention``
with ``implementation="xla"`` materialises [B, H, N, N] float32 logits (about 1.8 TB), so the
dense arm must be a flash-style kernel on each platform (``kernels.registry.PLATFORMS`` says
which): on a TPU "splash", JAX's splash attention with a full mask; on a GPU "cudnn", cuDNN's
flash attention (bf16); on a CPU "xla_flash", our XLA online softmax over query chunks. The
second control is our "b0" dense tiles on the TPU and GPU and XLA's einsum
("dot_product_attention") on the CPU.

The noise floor is the PSNR between two *different* dense executors, so the pair must differ.

On a CPU the dense arm is not our "b0" (the block-sparse scan over every tile): it measured 2.1x
slower than PyTorch's SDPA at 16,128 tokens, because B0 advances all query tiles together,
writing [B, H, N, BKV] scores per step, which would inflate every CPU speedup. "xla_flash"
(``kernels.executors.xla_flash``) computes the same pairs as plain matmuls over query chunks
and key blocks; "b0" stays available by name (``kernel.dense_executor=b0``).

Both kernels follow the dispatch's contract: q, k, v and out are [batch, tokens, heads, head_dim],
out = softmax(q k^T / sqrt(head_dim)) v.
"""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np

from kernels.executors.splash_tiles import SplashTiles, splash_tiles
from kernels.executors.tpu_generation import attached_generation
from kernels.masks.band import BandMask
from kernels.plans.block_sizes import BlockSizes
from kernels.registry import PLATFORMS, get_platform

# cuDNN flash attention (JAX's checks for bf16/fp16): head_dim a multiple of 8, at most 256 on
# Hopper and later (128 before; JAX itself refuses that case on older GPUs).
CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16),)
CUDNN_HEAD_DIM_MULTIPLE = 8
CUDNN_MAX_HEAD_DIM = 256


def dense_controls(platform: str) -> tuple[str, str]:
    """The platform's dense controls: (dense arm executor, noise-floor executor).

    Args:
        platform: "tpu", "gpu" (or "cuda") or "cpu".

    Returns:
        Two different names from ``kernels.policy.DENSE_EXECUTORS``: tpu ("splash", "b0"),
        gpu ("cudnn", "b0"), cpu ("xla_flash", "dot_product_attention").

    Raises:
        ValueError: on an unknown platform.
    """
    try:
        chosen = get_platform(platform)
    except ValueError as err:
        raise ValueError(f"{err}: platform={platform!r} has no dense controls") from None
    return chosen.dense_control, chosen.noise_floor_control


def check_dense_pair(dense: str, noise_floor: str) -> None:
    """Refuses a noise floor that would compare a dense executor with itself.

    Args:
        dense: executor of the dense arm.
        noise_floor: executor of the noise-floor arm.

    Raises:
        ValueError: when the two are equal (the floor would be an infinite PSNR, not a floor).
    """
    if dense == noise_floor:
        controls = {
            name for p in PLATFORMS.values() for name in (p.dense_control, p.noise_floor_control)
        }
        others = sorted(controls - {dense})
        raise ValueError(
            "the noise floor compares two different dense executors; "
            f"noise_floor_executor={noise_floor} equals dense_executor={dense}: choose another, "
            f"e.g. one of {others}"
        )


def _splash_module() -> types.ModuleType:
    # Imported on first use: it adds about 0.2 s to an import of the executors, and only TPU runs
    # (and their interpret-mode tests) need it.
    from jax.experimental.pallas.ops.tpu import splash_attention

    return splash_attention


def _band_sink_mask(tokens: int, half_width: int, sink: int):
    """Splash's lazy mask of our band plus sink, |q - k| <= w or k < sink, over ``tokens``:
    computed in the kernel from the indices (no [N, N] array), as splash's own LocalMask is."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    class BandSinkMask(masks._ComputableMask):  # the base of splash's own lazy masks
        key = (tokens, half_width, sink)

        def __init__(self) -> None:
            def band_sink(q_ids, kv_ids):
                return ((q_ids - half_width <= kv_ids) & (q_ids + half_width >= kv_ids)) | (
                    kv_ids < sink
                )

            super().__init__(shape=(tokens, tokens), mask_function=band_sink)

        def __eq__(self, other: object) -> bool:
            return getattr(other, "key", None) == self.key and isinstance(other, masks.Mask)

        def __hash__(self) -> int:
            return hash(self.key)

    return BandSinkMask()


@functools.lru_cache(maxsize=32)
def _splash_kernel(
    heads: int, tiles: SplashTiles, interpret: bool, band: tuple[int, int] | None = None
):
    """A splash MHA kernel over [heads, padded_tokens, head_dim] (cached): full mask, or with
    ``band`` = (half_width, sink) our band plus sink as splash's lazy mask.

    Building it processes the mask block by block on the host (about 2.5 s at 75,776 tokens), so
    one kernel serves every call with the same shape.
    """
    splash = _splash_module()
    n = tiles.padded_tokens
    one = splash.FullMask((n, n)) if band is None else _band_sink_mask(n, *band)
    mask = splash.MultiHeadMask([one] * heads)
    sizes = splash.BlockSizes(
        block_q=tiles.block_q, block_kv=tiles.block_kv, block_kv_compute=tiles.block_kv_compute
    )
    # The kernel keeps its block tables as arrays; built under a trace they would be that trace's
    # tracers, and the cache would leak them into the next one.
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mha_single_device(mask, block_sizes=sizes, interpret=interpret)


def splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    block_sizes: BlockSizes | None = None,
    block_kv_compute: int | None = None,
    interpret: bool = False,
    band: BandMask | None = None,
) -> jax.Array:
    """Dense attention by JAX's TPU splash attention kernel with a full mask (or, with ``band``,
    the same band-plus-sink mask our b1-b3 apply: the peer they are compared with).

    Splash runs on [heads, tokens, head_dim] and does not scale q, so q is scaled by
    1/sqrt(head_dim) (in float32, then cast back, as our b0 does) and moved heads-leading; the
    batch is a ``vmap``. Padded keys are excluded through segment ids (real tokens segment 0,
    padding segment 1), which keeps the mask a cheap full mask; padded query rows are dropped.
    Off a TPU it runs only with ``interpret=True`` (JAX raises "Only interpret mode is supported
    on CPU backend" otherwise); exporting for platform "tpu" works from a CPU.

    Args:
        q: [batch, tokens, heads, head_dim], float32 or bfloat16 (unscaled).
        k: [batch, tokens, heads, head_dim], same dtype.
        v: [batch, tokens, heads, head_dim], same dtype.
        block_sizes: splash tiles (multiples of 128); default ``splash_tiles``'s rule for the
            attached chip's generation (``kernels.executors.splash_tiles``): the fastest tiling
            that fits its scoped VMEM.
        block_kv_compute: key chunk per online-softmax update; default gcd(block_kv, 512).
        interpret: Pallas interpret mode (CPU tests).
        band: a ``BandMask`` over the tokens, applied as splash's lazy mask; None: dense.

    Returns:
        [batch, tokens, heads, head_dim] in q's dtype.
    """
    _, n, heads, d = q.shape
    if band is not None and band.tokens != n:
        raise ValueError(f"band covers {band.tokens} tokens but q has {n}")
    generation = None if interpret else attached_generation()
    tiles = splash_tiles(
        n,
        block_sizes,
        block_kv_compute,
        head_dim=d,
        itemsize=q.dtype.itemsize,
        generation=generation,
    )
    shape = None if band is None else (band.half_width, band.sink)
    kernel = _splash_kernel(heads, tiles, interpret, shape)
    pad = ((0, 0), (0, 0), (0, tiles.padded_tokens - n), (0, 0))
    scaled = (q.astype(jnp.float32) / np.sqrt(d)).astype(q.dtype)
    qt, kt, vt = (jnp.pad(jnp.transpose(x, (0, 2, 1, 3)), pad) for x in (scaled, k, v))
    if tiles.padded_tokens == n:
        out = jax.vmap(kernel)(qt, kt, vt)
    else:
        segments = (jnp.arange(tiles.padded_tokens) >= n).astype(jnp.int32)
        ids = _splash_module().SegmentIds(q=segments, kv=segments)
        out = jax.vmap(lambda a, b, c: kernel(a, b, c, segment_ids=ids))(qt, kt, vt)
    return jnp.transpose(out[:, :, :n], (0, 2, 1, 3)).astype(q.dtype)


def check_cudnn_inputs(q: jax.Array, k: jax.Array, v: jax.Array) -> None:
    """Raises ValueError unless q, k, v suit cuDNN flash attention.

    Args:
        q: [batch, tokens, heads, head_dim].
        k: [batch, tokens, heads, head_dim].
        v: [batch, tokens, heads, head_dim].
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if jnp.dtype(x.dtype) not in CUDNN_DTYPES:
            raise ValueError(
                f"executor 'cudnn' (cuDNN flash attention) takes bfloat16 inputs but {name}.dtype="
                f"{x.dtype}; run with compute dtype bfloat16 (dtype=bfloat16), or use executor "
                "'b0' for float32"
            )
    d = q.shape[-1]
    if d % CUDNN_HEAD_DIM_MULTIPLE or d > CUDNN_MAX_HEAD_DIM:
        raise ValueError(
            f"executor 'cudnn' needs head_dim a multiple of {CUDNN_HEAD_DIM_MULTIPLE} up to "
            f"{CUDNN_MAX_HEAD_DIM}; got {d}"
        )


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Dense attention by cuDNN flash attention (``jax.nn.dot_product_attention``, "cudnn").

    cuDNN takes the [batch, tokens, heads, head_dim] layout directly and scales by
    1/sqrt(head_dim) itself. Tracing needs the CUDA plugin's cuDNN (JAX checks its version and
    the GPU's compute capability while tracing), so this neither runs nor lowers on a CPU-only
    machine (with or without the plugin); there it raises a ValueError naming the executors
    that do.

    Args:
        q: [batch, tokens, heads, head_dim], bfloat16 (unscaled).
        k: [batch, tokens, heads, head_dim], bfloat16.
        v: [batch, tokens, heads, head_dim], bfloat16.

    Returns:
        [batch, tokens, heads, head_dim] bfloat16.
    """
    check_cudnn_inputs(q, k, v)
    try:
        return jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    except (RuntimeError, NotImplementedError) as error:
        # Without the CUDA plugin JAX's cuDNN check fails while tracing (RuntimeError); with the
        # plugin but no GPU, tracing passes and the CPU has no lowering for the fused call.
        if "cuDNN" not in str(error) and "dot_product_attention" not in str(error):
            raise
        raise ValueError(
            f"executor 'cudnn' needs a CUDA GPU with cuDNN ({error}); on this machine use "
            f"'b0' or 'dot_product_attention' (dense_controls('cpu') = {dense_controls('cpu')})"
        ) from error
