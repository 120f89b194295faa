"""Tile sizes of the block-sparse executors, kept apart from anything that changes numerics."""

from __future__ import annotations

import dataclasses

from kernels.masks.protocols import BlockSizesLike

# Smallest tile granularity per backend: the XLA path only needs sublane-friendly sizes; the Pallas
# TPU kernel feeds the MXU, whose tiles are 128 wide; the Pallas GPU (Triton) kernel's blocks are
# tensor-core operands of at least 16 rows, and Triton tensors have power-of-two shapes.
BACKEND_MULTIPLE: dict[str, int] = {"xla": 8, "pallas_tpu": 128, "pallas_gpu": 16}
POWER_OF_TWO_BACKENDS = frozenset({"pallas_gpu"})


def is_power_of_two(value: int) -> bool:
    """Whether ``value`` is 1, 2, 4, 8, ... (Triton tensor sides must be)."""
    return value > 0 and value & (value - 1) == 0


def _next_power_of_two(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def tile_limit(tokens: int, backend: str) -> int:
    """The largest tile ``backend`` accepts for a ``tokens``-long sequence.

    The sequence rounded up to the backend's granularity (a bigger tile would be mostly padding);
    for power-of-two backends, the next power of two at or above that.
    """
    multiple = BACKEND_MULTIPLE[backend]
    limit = -(-tokens // multiple) * multiple
    return _next_power_of_two(limit) if backend in POWER_OF_TWO_BACKENDS else limit


def _plan_backend(backend: str) -> str:
    """The backend whose tile granularity plans the tiles of a run on ``backend``.

    The reference backend computes the same logical mask densely; its tiles only shape the mask
    (B3 rounding), so they follow the XLA granularity. Other backends plan their own tiles.

    Args:
        backend: a run's attention backend ("xla", "pallas_tpu", "pallas_gpu" or "reference").

    Returns:
        A key of ``BACKEND_MULTIPLE`` for the known backends; anything else unchanged (so
        ``BlockSizes.validate`` names it in its error).
    """
    return "xla" if backend == "reference" else backend


def same_tiles(a: BlockSizesLike, b: BlockSizesLike) -> bool:
    """Whether ``a`` and ``b`` cut a sequence into the same tiles (a compute sub-tile aside)."""
    return (a.block_q, a.block_kv) == (b.block_q, b.block_kv)


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Query and key/value tile sizes, and the key sub-tile of each online-softmax update.

    Attributes:
        block_q: BQ, query rows per tile.
        block_kv: BKV, key/value rows per tile.
        block_kv_compute: key rows per online-softmax update inside a key/value tile, on the
            Pallas TPU kernels (b0-b3 on "pallas_tpu", and splash); None keeps the kernel's
            default, gcd(block_kv, 512). The kernels check that it divides ``block_kv`` in
            multiples of 128; the other executors ignore it.
    """

    block_q: int
    block_kv: int
    block_kv_compute: int | None = None

    def __post_init__(self) -> None:
        for name in ("block_q", "block_kv", "block_kv_compute"):
            value = getattr(self, name)
            if value is None and name == "block_kv_compute":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BlockSizes.{name}={value!r}: expected a positive int")

    def validate(self, tokens: int, backend: str = "xla") -> None:
        """Raises ValueError unless these tiles suit ``tokens`` on ``backend``.

        Tiles must be multiples of the backend's granularity (powers of two on "pallas_gpu"),
        and no larger than ``tile_limit(tokens, backend)`` (a bigger tile would be mostly
        padding).

        Args:
            tokens: sequence length N.
            backend: "xla", "pallas_tpu", "pallas_gpu" or "reference" (which
                plans on XLA's granularity).
        """
        backend = _plan_backend(backend)
        if backend not in BACKEND_MULTIPLE:
            raise ValueError(f"backend={backend!r}; use one of {sorted(BACKEND_MULTIPLE)}")
        multiple = BACKEND_MULTIPLE[backend]
        limit = tile_limit(tokens, backend)
        for name in ("block_q", "block_kv"):
            value = getattr(self, name)
            if backend in POWER_OF_TWO_BACKENDS and (
                value < multiple or not is_power_of_two(value)
            ):
                lower = max(multiple, 1 << (value.bit_length() - 1))
                raise ValueError(
                    f"{name}={value} is not a power of two of at least {multiple} as backend "
                    f"{backend!r} needs (Triton blocks); try {lower} or {max(multiple, 2 * lower)}"
                )
            if value % multiple:
                near = max(multiple, round(value / multiple) * multiple)
                raise ValueError(
                    f"{name}={value} is not a multiple of {multiple} as backend {backend!r} "
                    f"needs; try {near}"
                )
            if value > limit:
                rounded = "a power of two" if backend in POWER_OF_TWO_BACKENDS else str(multiple)
                raise ValueError(
                    f"{name}={value} exceeds the {tokens}-token sequence rounded up to "
                    f"{rounded} ({limit}); use at most {limit}"
                )


# Tiles per backend before shrinking to short sequences (query x key/value). Pallas TPU: the seed's
# 3,328 x 1,536 (26 x 12 MXU tiles of 128). XLA: 128 x 128, what the CPU default job runs
# (conf/kernel/auto.yaml), small enough for fine-grained sparsity. Pallas GPU: 128 x 64, the
# FlashAttention-2 forward tile for head_dim 128 (a 128 x 128 float32 accumulator across 8 warps,
# K and V blocks of 64 rows double-buffered in shared memory, ~96 KiB of an H200's 227 KiB).
AUTO_TILES: dict[str, tuple[int, int]] = {
    "pallas_tpu": (3328, 1536),
    "xla": (128, 128),
    "pallas_gpu": (128, 64),
}


def largest_tile_within(width: int, backend: str) -> int:
    """The largest tile side of ``backend``'s granularity that is at most ``width`` tokens.

    A multiple of ``BACKEND_MULTIPLE[backend]`` (a power of two on "pallas_gpu"); never below the
    granularity itself, so a band narrower than the smallest tile gets the smallest tile (and
    ``SparsitySchedule.validate`` refuses that band, naming the density to raise).

    Args:
        width: a band's full width 2w + 1 in tokens.
        backend: "xla", "pallas_tpu", "pallas_gpu" or "reference".
    """
    backend = _plan_backend(backend)
    multiple = BACKEND_MULTIPLE[backend]
    if backend in POWER_OF_TWO_BACKENDS:
        return max(multiple, 1 << (max(width, 1).bit_length() - 1))
    return max(multiple, width // multiple * multiple)


def auto_block_sizes(tokens: int, backend: str, band_width: int | None = None) -> BlockSizes:
    """The backend's tiles for a ``tokens``-long sequence whose sparse band is ``band_width`` wide.

    Rule: ``AUTO_TILES[backend]``, each side shrunk to the smaller of
    - ``tile_limit(tokens, backend)``, the sequence rounded up to the backend's granularity
      (``BACKEND_MULTIPLE``: 128 on "pallas_tpu", 8 on "xla"; a power of two of at least 16 on
      "pallas_gpu"), so a tile is never mostly padding;
    - ``largest_tile_within(band_width, backend)``, so no tile is wider than the band the sparse
      arm keeps: a wider tile covers the band in every tile it touches and skips nothing.
    Why the TPU tiles are large: the kernel's VMEM working set depends on the tiles and not on N,
    while its scalar-prefetched visit table (SMEM, 1 MiB on v6e) grows with
    (N / block_q) * (N / block_kv); 128 x 128 tiles overflow SMEM at 1080p, the seed's tiles need
    tens of KiB (``kernels.executors.pallas_tpu_budget``).

    Args:
        tokens: sequence length N (per attention call).
        backend: "pallas_tpu", "pallas_gpu", "xla" or "reference" (which plans on
            XLA's granularity).
        band_width: the narrowest sparse band of the run, full width 2w + 1 in tokens
            (``SparsitySchedule.band``); None for a dense run.

    Returns:
        BlockSizes valid for ``tokens`` on ``backend``.

    Raises:
        ValueError: on an unknown backend or a non-positive ``tokens`` or ``band_width``.
    """
    backend = _plan_backend(backend)
    if backend not in AUTO_TILES:
        raise ValueError(f"backend={backend!r}; auto tiles are known for {sorted(AUTO_TILES)}")
    for name, value in (("tokens", tokens), ("band_width", band_width)):
        if value is None and name == "band_width":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive int")
    cap = tile_limit(tokens, backend)
    if band_width is not None:
        cap = min(cap, largest_tile_within(band_width, backend))
    block_q, block_kv = AUTO_TILES[backend]
    return BlockSizes(min(block_q, cap), min(block_kv, cap))
