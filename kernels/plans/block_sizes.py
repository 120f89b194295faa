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
