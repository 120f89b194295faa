"""Tile sizes of the block-sparse executors, kept apart from anything that changes numerics."""

from __future__ import annotations

import dataclasses

# Smallest tile granularity per backend: the XLA path only needs sublane-friendly sizes; the Pallas
# TPU kernel feeds the MXU, whose tiles are 128 wide.
BACKEND_MULTIPLE: dict[str, int] = {"xla": 8, "pallas_tpu": 128}


def plan_backend(backend: str) -> str:
    """The backend whose tile granularity plans the tiles of a run on ``backend``.

    The reference backend computes the same logical mask densely; its tiles only shape the mask
    (B3 rounding), so they follow the XLA granularity. Other backends plan their own tiles.

    Args:
        backend: a run's attention backend ("xla", "pallas_tpu" or "reference").

    Returns:
        A key of ``BACKEND_MULTIPLE`` for the known backends; anything else unchanged (so
        ``BlockSizes.validate`` names it in its error).
    """
    return "xla" if backend == "reference" else backend


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Query and key/value tile sizes.

    Attributes:
        block_q: BQ, query rows per tile.
        block_kv: BKV, key/value rows per tile.
    """

    block_q: int
    block_kv: int

    def __post_init__(self) -> None:
        for name in ("block_q", "block_kv"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BlockSizes.{name}={value!r}: expected a positive int")

    def validate(self, tokens: int, backend: str = "xla") -> None:
        """Raises ValueError unless these tiles suit ``tokens`` on ``backend``.

        Tiles must be multiples of the backend's granularity, and no larger than the sequence
        rounded up to that granularity (a bigger tile would be mostly padding).

        Args:
            tokens: sequence length N.
            backend: "xla" or "pallas_tpu".
        """
        if backend not in BACKEND_MULTIPLE:
            raise ValueError(f"backend={backend!r}; use one of {sorted(BACKEND_MULTIPLE)}")
        multiple = BACKEND_MULTIPLE[backend]
        limit = -(-tokens // multiple) * multiple
        for name in ("block_q", "block_kv"):
            value = getattr(self, name)
            if value % multiple:
                near = max(multiple, round(value / multiple) * multiple)
                raise ValueError(
                    f"{name}={value} is not a multiple of {multiple} as backend {backend!r} "
                    f"needs; try {near}"
                )
            if value > limit:
                raise ValueError(
                    f"{name}={value} exceeds the {tokens}-token sequence rounded up to "
                    f"{multiple} ({limit}); use at most {limit}"
                )


def default_block_sizes(tokens: int, backend: str = "xla") -> BlockSizes:
    """Tiles of 512 (CPU-friendly), shrunk to the padded sequence for short sequences.

    Args:
        tokens: sequence length N.
        backend: "xla" or "pallas_tpu".

    Returns:
        BlockSizes valid for ``tokens`` on ``backend``.
    """
    if backend not in BACKEND_MULTIPLE:
        raise ValueError(f"backend={backend!r}; use one of {sorted(BACKEND_MULTIPLE)}")
    multiple = BACKEND_MULTIPLE[backend]
    size = min(512, -(-tokens // multiple) * multiple)
    return BlockSizes(size, size)


# Tiles per backend before shrinking to short sequences (query x key/value). Pallas TPU: the seed's
# 3,328 x 1,536 (26 x 12 MXU tiles of 128). XLA: 128 x 128, what the CPU default job runs
# (conf/kernel/auto.yaml), small enough for fine-grained sparsity.
AUTO_TILES: dict[str, tuple[int, int]] = {"pallas_tpu": (3328, 1536), "xla": (128, 128)}


def auto_block_sizes(tokens: int, backend: str) -> BlockSizes:
    """The backend's tiles for a ``tokens``-long sequence.

    Rule: ``AUTO_TILES[backend]``, each side shrunk to the sequence rounded up to the backend's
    granularity (``BACKEND_MULTIPLE``: 128 on "pallas_tpu", 8 on "xla") when the sequence is
    shorter than a tile. Why the TPU tiles are large: the kernel's VMEM working set depends on
    the tiles and not on N, while its scalar-prefetched visit table (SMEM, 1 MiB on v6e) grows
    with (N / block_q) * (N / block_kv); 128 x 128 tiles overflow SMEM at 1080p, the seed's tiles
    need tens of KiB (``kernels.executors.pallas_tpu_budget``).

    Args:
        tokens: sequence length N (per attention call).
        backend: "pallas_tpu" or "xla" (for "reference", pass ``plan_backend(backend)``).

    Returns:
        BlockSizes valid for ``tokens`` on ``backend``.

    Raises:
        ValueError: on an unknown backend or a non-positive ``tokens``.
    """
    if backend not in AUTO_TILES:
        raise ValueError(f"backend={backend!r}; auto tiles are known for {sorted(AUTO_TILES)}")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise ValueError(f"tokens={tokens!r}: expected a positive int")
    multiple = BACKEND_MULTIPLE[backend]
    padded = -(-tokens // multiple) * multiple
    block_q, block_kv = AUTO_TILES[backend]
    return BlockSizes(min(block_q, padded), min(block_kv, padded))
