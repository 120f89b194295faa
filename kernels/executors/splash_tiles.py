"""The tiles of the TPU's dense control, JAX's splash attention, and whether they fit the chip.

Splash's ``pallas_call`` asks for no scoped VMEM limit, so its tiles must fit the default of the
chip it compiles for (``kernels.executors.tpu_generation``: v5e 16 MiB, v6e 32 MiB). A tiling whose
working set passes it fails to compile (``CompileTimeScopedVmemOom``). The rule here: the first
tiling of ``SPLASH_PREFERENCE`` (fastest first, as measured), each side shrunk to the sequence,
whose VMEM estimate (``splash_vmem_bytes``) fits the chip's limit.
"""

from __future__ import annotations

import dataclasses
import math

from kernels.executors.tpu_generation import MiB, describe_limit, scoped_vmem_limit
from kernels.plans.block_sizes import BlockSizes

# Splash feeds the MXU with 128-wide tiles: every tile (and the padded sequence) is a multiple.
SPLASH_MULTIPLE = 128
SPLASH_BLOCK_KV_COMPUTE = 512
# (block_q, block_kv, block_kv_compute), fastest first. Measured on a TPU v5e at the seed's 720p
# call (75,600 tokens, 10 heads x 128, bf16, medians of 10): 1024 x 2048 x 512 180.7 ms,
# 2048 x 1024 x 1024 193.9 ms, 1024 x 1024 x 1024 197.9 ms; 2048 x 2048 x 512 and (at 17,160
# tokens) 2048 x 1024 x 512 ran out of v5e's 16 MiB. Smaller tilings follow for short sequences
# and small limits.
SPLASH_PREFERENCE: tuple[tuple[int, int, int], ...] = (
    (1024, 2048, 512),
    (2048, 1024, 512),
    (1024, 1024, 512),
    (512, 1024, 512),
    (512, 512, 512),
    (256, 512, 256),
    (128, 128, 128),
)
# Mosaic's own allocations beside the counted buffers (semaphores, DMA descriptors, alignment).
_INTERNAL_BYTES = MiB // 4


@dataclasses.dataclass(frozen=True)
class SplashTiles:
    """Splash tiles for one sequence.

    Attributes:
        block_q: query rows per tile.
        block_kv: key/value rows per tile.
        block_kv_compute: key rows per online-softmax update (divides ``block_kv``).
        padded_tokens: the sequence padded to a multiple of both tiles.
    """

    block_q: int
    block_kv: int
    block_kv_compute: int
    padded_tokens: int


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def splash_vmem_bytes(tiles: SplashTiles, tokens: int, head_dim: int, itemsize: int) -> int:
    """Estimated scoped VMEM of one splash kernel instance (bytes), an upper-leaning model.

    Counted: q, k, v and the output blocks, double-buffered; the float32 softmax state m and l
    ([block_q, 128] each) and the accumulator [block_q, head_dim]; the float32 scores of a
    [block_q, block_kv] block (twice when one chunk spans the block); and, when the sequence is
    padded, the int32 segment ids ([block_q, 128] for q, [8, block_kv] for k), double-buffered.
    Checked against Mosaic (libtpu 0.0.42.1, bf16, head_dim 128): on a TPU v5e 2048 x 1024 x 512
    at 17,160 tokens needed 16.16 MiB (this model: 16.3); compiled for v5e from a CPU, 2048 x
    2048 x 512 needed 24.94 MiB (model: 25.4) and 2048 x 1024 x 1024 19.03 MiB (model: 24.3,
    over).

    Args:
        tiles: the tiling.
        tokens: the sequence length before padding.
        head_dim: channels per head.
        itemsize: bytes per element of q, k, v (2 for bfloat16).
    """
    bq, bkv = tiles.block_q, tiles.block_kv
    blocks = 2 * itemsize * head_dim * (2 * bq + 2 * bkv)
    softmax = 4 * bq * (2 * SPLASH_MULTIPLE + head_dim)
    # One chunk per block (block_kv_compute == block_kv) measured larger than several.
    scores = 4 * bq * bkv * (2 if tiles.block_kv_compute == bkv else 1)
    segments = 0 if tiles.padded_tokens == tokens else 2 * 4 * (bq * SPLASH_MULTIPLE + 8 * bkv)
    return blocks + softmax + scores + segments + _INTERNAL_BYTES


def _tiles(tokens: int, block_q: int, block_kv: int, block_kv_compute: int | None) -> SplashTiles:
    padded = _round_up(tokens, math.lcm(block_q, block_kv))
    if block_kv_compute is None:
        block_kv_compute = math.gcd(block_kv, SPLASH_BLOCK_KV_COMPUTE)
    if block_kv_compute % SPLASH_MULTIPLE or block_kv % block_kv_compute:
        raise ValueError(
            f"block_kv_compute={block_kv_compute} must be a multiple of {SPLASH_MULTIPLE} that "
            f"divides block_kv={block_kv}"
        )
    return SplashTiles(block_q, block_kv, block_kv_compute, padded)


def _candidates(tokens: int) -> list[SplashTiles]:
    """``SPLASH_PREFERENCE`` with each side shrunk to the sequence (rounded up to 128), once."""
    cap = _round_up(tokens, SPLASH_MULTIPLE)
    seen: list[SplashTiles] = []
    for bq, bkv, chunk in SPLASH_PREFERENCE:
        bq, bkv = min(bq, cap), min(bkv, cap)
        tiles = _tiles(tokens, bq, bkv, math.gcd(bkv, chunk))
        if tiles not in seen:
            seen.append(tiles)
    return seen


def splash_tiles(
    tokens: int,
    block_sizes: BlockSizes | None = None,
    block_kv_compute: int | None = None,
    *,
    head_dim: int = 128,
    itemsize: int = 2,
    generation: str | None = None,
) -> SplashTiles:
    """The splash tiles and padded length for ``tokens`` on a chip of ``generation``.

    Default rule: the first of ``SPLASH_PREFERENCE`` (sides shrunk to the sequence rounded up to
    128) whose ``splash_vmem_bytes`` fits ``scoped_vmem_limit(generation)``; the sequence is
    padded to a multiple of both tiles. Explicit tiles are checked against the same limit.

    Args:
        tokens: sequence length N.
        block_sizes: explicit (block_q, block_kv), multiples of 128.
        block_kv_compute: explicit compute chunk (a multiple of 128 dividing block_kv).
        head_dim: channels per head (VMEM estimate).
        itemsize: bytes per element of q, k, v (VMEM estimate).
        generation: "v5e", "v6e", ... or None (no TPU attached: the smallest default limit).

    Returns:
        The SplashTiles.

    Raises:
        ValueError: tiles that are not multiples of 128, a chunk that does not divide block_kv,
            or tiles whose VMEM estimate passes the chip's scoped limit (naming the limit and
            how to raise it).
    """
    limit = scoped_vmem_limit(generation)
    if block_sizes is not None:
        block_sizes.validate(tokens, "pallas_tpu")  # multiples of 128, no larger than needed
        tiles = _tiles(tokens, block_sizes.block_q, block_sizes.block_kv, block_kv_compute)
        candidates = [tiles]
    else:
        candidates = _candidates(tokens)
        if block_kv_compute is not None:
            candidates = [
                _tiles(tokens, t.block_q, t.block_kv, block_kv_compute) for t in candidates
            ]
    for tiles in candidates:
        if splash_vmem_bytes(tiles, tokens, head_dim, itemsize) <= limit:
            return tiles
    need = splash_vmem_bytes(candidates[0], tokens, head_dim, itemsize)
    raise ValueError(
        f"splash tiles {candidates[0].block_q} x {candidates[0].block_kv} x "
        f"{candidates[0].block_kv_compute} need about {need / MiB:.1f} MiB of scoped VMEM, over "
        f"this chip's {describe_limit(generation)}; raise the compiler's limit with "
        "LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=<KiB>, or use smaller tiles"
    )
