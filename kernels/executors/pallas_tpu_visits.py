"""Host-side visit slots for the Pallas TPU block-sparse kernel.

A tile plan keeps full and partial key tiles in two lists per query tile. The kernel walks one flat
list of visit slots instead, so each grid step reads its key tile index and its "masked" flag from
scalar-prefetched memory. This module merges the two lists (NumPy, once per plan), decides which
visits need the in-kernel mask, and packs the visit codes into the 32-bit words scalar memory holds.

A visit code is ``kv_index * 2 + masked``. Scalar memory (SMEM, 1 MiB on TPU v6e) is addressed in
32-bit words, so when every code fits in int16 (below ``CODE_PACK_LIMIT``) two codes share one
int32 word, code ``t`` in the low half of word ``t // 2`` when ``t`` is even and in the high half
when odd; otherwise each code keeps a word of its own. The kernel unpacks with a shift and a mask.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kernels.masks.protocols import TilePlanLike
from kernels.plans.tiles import VARIANTS

# What the in-kernel predicate of a masked visit checks, per variant (``kernels.plans.tiles.VARIANTS``):
# "mask" evaluates the plan's mask (band + sink + padding); "padding" only drops padded keys, since
# for b0 (dense) and b3 (tile-rounded) the set of visited tiles already is the mask.
PARTIAL_PREDICATE: dict[str, str] = {"b0": "padding", "b1": "mask", "b2": "mask", "b3": "padding"}
# Codes below this fit in int16 (non-negative), so two share an int32 word and the word stays
# non-negative too.
CODE_PACK_LIMIT = 1 << 15
CODE_BITS = 16
CODE_MASK = (1 << CODE_BITS) - 1


@dataclasses.dataclass(frozen=True)
class VisitSlots:
    """Flat per-query-tile visit lists, ready for scalar prefetch.

    Attributes:
        kv_index: int32 [num_q_tiles * slots]; key tile visited at (q tile i, slot j) sits at
            ``i * slots + j``. Slots past a tile's count repeat its last visited index, so the
            pipelined DMA sees an unchanged block index and fetches nothing new.
        masked: int32 [num_q_tiles * slots]; 1 where the visit runs the masked path.
        count: int32 [num_q_tiles]; number of real visits per query tile.
        slots: visit slots per query tile (the third grid axis), at least 1.
        num_q_tiles: number of query tiles.
        num_kv_tiles: number of key tiles the padded key sequence must hold.
    """

    kv_index: np.ndarray
    masked: np.ndarray
    count: np.ndarray
    slots: int
    num_q_tiles: int
    num_kv_tiles: int

    def codes(self) -> np.ndarray:
        """int32 [num_q_tiles * slots]: ``kv_index * 2 + masked`` per visit (the unpacked reference).

        One array instead of two halves what long sequences with small tiles need in SMEM.
        """
        return (self.kv_index.astype(np.int64) * 2 + self.masked).astype(np.int32)

    def codes_per_word(self, limit: int = CODE_PACK_LIMIT) -> int:
        """2 when every code is below ``limit`` (two int16 codes per int32 word), else 1.

        Args:
            limit: packing threshold in [0, ``CODE_PACK_LIMIT``]; 0 never packs (tests use it
                to force the one-code-per-word path).
        """
        if not 0 <= limit <= CODE_PACK_LIMIT:
            raise ValueError(f"limit={limit}: expected 0..{CODE_PACK_LIMIT} (codes must fit int16)")
        return 2 if int(self.codes().max(initial=0)) < limit else 1

    def packed(self, limit: int = CODE_PACK_LIMIT) -> np.ndarray:
        """The visit codes as the kernel scalar-prefetches them.

        Args:
            limit: packing threshold (see ``codes_per_word``).

        Returns:
            int32 [ceil(num_q_tiles * slots / codes_per_word)]: with two codes per word, code
            ``t`` sits in bits ``16 * (t % 2)`` .. ``+15`` of word ``t // 2`` (an odd count leaves
            the last high half zero); with one code per word, ``codes()`` itself.
        """
        codes = self.codes()
        if self.codes_per_word(limit) == 1:
            return codes
        pairs = np.pad(codes, (0, codes.size % 2)).reshape(-1, 2)
        return (pairs[:, 0] | (pairs[:, 1] << CODE_BITS)).astype(np.int32)

    def smem_bytes(self, limit: int = CODE_PACK_LIMIT) -> int:
        """Bytes of the two scalar-prefetched tables: packed codes and per-tile counts."""
        return int(self.packed(limit).nbytes + self.count.astype(np.int32).nbytes)

    @property
    def visited(self) -> int:
        """Total number of tile visits."""
        return int(self.count.sum())

    @property
    def masked_visits(self) -> int:
        """Number of visits that run the masked path."""
        valid = np.arange(self.slots)[None, :] < self.count[:, None]
        return int(self.masked.reshape(self.num_q_tiles, self.slots)[valid].sum())


def unpack_codes(words: np.ndarray, codes_per_word: int, length: int) -> np.ndarray:
    """Inverse of ``VisitSlots.packed`` (the NumPy twin of the kernel's unpacking).

    Args:
        words: int32 [num_words] as returned by ``VisitSlots.packed``.
        codes_per_word: 1 or 2, as returned by ``VisitSlots.codes_per_word``.
        length: number of codes (``num_q_tiles * slots``).

    Returns:
        int32 [length] visit codes.
    """
    words = np.asarray(words, np.int64) & 0xFFFFFFFF  # the word's bits, as the kernel sees them
    if codes_per_word == 1:
        return words[:length].astype(np.int32)
    t = np.arange(length)
    return ((words[t // 2] >> (CODE_BITS * (t % 2))) & CODE_MASK).astype(np.int32)


def plan_visit_slots(plan: TilePlanLike, variant: str) -> VisitSlots:
    """``build_visit_slots`` for a tile plan, with the plan's own tokens and key tile size.

    The kernel and the SMEM budget (``kernels.executors.pallas_tpu_budget``) both build their visit
    lists here, so the budget counts exactly the table the kernel prefetches.

    Args:
        plan: a ``kernels.plans.tiles.TilePlan``-like object (``full_kv``, ``full_count``,
            ``partial_kv``, ``partial_count``, ``tokens``, ``block_sizes``).
        variant: one of ``kernels.plans.tiles.VARIANTS``.

    Returns:
        The plan's ``VisitSlots``.
    """
    return build_visit_slots(
        plan.full_kv,
        plan.full_count,
        plan.partial_kv,
        plan.partial_count,
        variant=variant,
        tokens=int(plan.tokens),
        block_kv=plan_block_sizes(plan)[1],
    )


def plan_block_sizes(plan: TilePlanLike) -> tuple[int, int]:
    """(block_q, block_kv) of a plan whose ``block_sizes`` is a ``BlockSizes`` or a pair."""
    sizes = plan.block_sizes
    if hasattr(sizes, "block_q") and hasattr(sizes, "block_kv"):
        return int(sizes.block_q), int(sizes.block_kv)
    block_q, block_kv = sizes
    return int(block_q), int(block_kv)


def _checked_lists(kv: np.ndarray, count: np.ndarray, name: str, num_q_tiles: int) -> np.ndarray:
    """Validates one (tile list, count) pair of a plan and returns the count as int64."""
    kv = np.asarray(kv)
    count = np.asarray(count)
    if kv.ndim != 2 or kv.shape[0] != num_q_tiles:
        raise ValueError(
            f"plan.{name}_kv must be [num_q_tiles={num_q_tiles}, max_{name}], got shape {kv.shape}"
        )
    if count.shape != (num_q_tiles,):
        raise ValueError(
            f"plan.{name}_count must be [num_q_tiles={num_q_tiles}], got shape {count.shape}"
        )
    if np.any(count < 0) or np.any(count > kv.shape[1]):
        raise ValueError(
            f"plan.{name}_count must lie in [0, {kv.shape[1]}] (the list width), "
            f"got values in [{count.min()}, {count.max()}]"
        )
    return count.astype(np.int64)


def _validated(full_kv, full_count, partial_kv, partial_count, variant):
    """Checks the variant and list shapes; returns (num_q_tiles, full counts, partial counts)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if np.ndim(full_count) != 1 or np.size(full_count) == 0:
        raise ValueError(
            f"plan.full_count must be a non-empty 1-D array, got shape {np.shape(full_count)}"
        )
    num_q_tiles = int(np.size(full_count))
    full_n = _checked_lists(full_kv, full_count, "full", num_q_tiles)
    part_n = _checked_lists(partial_kv, partial_count, "partial", num_q_tiles)
    return num_q_tiles, full_n, part_n


def build_visit_slots(
    full_kv: np.ndarray,
    full_count: np.ndarray,
    partial_kv: np.ndarray,
    partial_count: np.ndarray,
    *,
    variant: str,
    tokens: int,
    block_kv: int,
) -> VisitSlots:
    """Merges a plan's full and partial lists into one visit list per query tile.

    Visits within a query tile are sorted by key tile index (one pass over K/V in memory order).
    A listed tile that reaches past ``tokens`` is always masked, whatever the plan calls it: padded
    keys must get exactly zero weight and only the masked path drops them.

    Args:
        full_kv: int32 [num_q_tiles, max_full] key tiles every pair of which is kept.
        full_count: int32 [num_q_tiles] valid entries of ``full_kv`` per row.
        partial_kv: int32 [num_q_tiles, max_partial] key tiles that need the element mask.
        partial_count: int32 [num_q_tiles] valid entries of ``partial_kv`` per row.
        variant: one of ``kernels.plans.tiles.VARIANTS``; "b1" masks every visit.
        tokens: real (unpadded) sequence length.
        block_kv: key tile size.

    Returns:
        The merged ``VisitSlots``.

    Raises:
        ValueError: on an unknown variant, inconsistent list shapes or counts, negative tile
            indices, or a tile listed twice for one query tile.
    """
    num_q_tiles, full_n, part_n = _validated(
        full_kv, full_count, partial_kv, partial_count, variant
    )
    full_kv = np.asarray(full_kv, np.int64)
    partial_kv = np.asarray(partial_kv, np.int64)
    # One row per query tile: full entries, then partial ones; invalid entries sort to the end.
    index = np.concatenate([full_kv, partial_kv], axis=1)
    flag = np.concatenate([np.zeros(full_kv.shape, bool), np.ones(partial_kv.shape, bool)], axis=1)
    valid = np.concatenate(
        [
            np.arange(full_kv.shape[1])[None, :] < full_n[:, None],
            np.arange(partial_kv.shape[1])[None, :] < part_n[:, None],
        ],
        axis=1,
    )
    count = full_n + part_n
    _check_rows(index, valid, full_kv, full_n, partial_kv, part_n)
    order = np.argsort(np.where(valid, index, np.iinfo(np.int64).max), axis=1, kind="stable")
    index = np.take_along_axis(index, order, axis=1)
    flag = np.take_along_axis(flag, order, axis=1)
    slots = max(1, int(count.max()))
    if index.shape[1] < slots:  # both lists have width 0: one dummy slot
        index = np.zeros((num_q_tiles, slots), np.int64)
        flag = np.zeros((num_q_tiles, slots), bool)
    index, flag = index[:, :slots], flag[:, :slots]
    rows = np.arange(num_q_tiles)
    max_index = int(index[rows, np.maximum(count, 1) - 1][count > 0].max(initial=0))
    num_kv_tiles = max(math.ceil(tokens / block_kv), max_index + 1)
    if variant == "b1":
        flag = np.ones_like(flag)
    # Padded keys get zero weight only on the masked path.
    flag = flag | ((index + 1) * block_kv > tokens)
    last = np.maximum(count, 1) - 1
    real = np.arange(slots)[None, :] < count[:, None]
    empty = (count == 0)[:, None]
    kv_index = np.where(real, index, index[rows, last][:, None])
    masked = np.where(real, flag, flag[rows, last][:, None])
    kv_index = np.where(empty, 0, kv_index).astype(np.int32)
    masked = np.where(empty, 0, masked).astype(np.int32)
    return VisitSlots(
        kv_index=kv_index.reshape(-1),
        masked=masked.reshape(-1),
        count=count.astype(np.int32),
        slots=slots,
        num_q_tiles=num_q_tiles,
        num_kv_tiles=num_kv_tiles,
    )


def _check_rows(index, valid, full_kv, full_n, partial_kv, part_n) -> None:
    """Raises, naming the first bad query tile, on a negative or repeated key tile index."""
    negative = (valid & (index < 0)).any(axis=1)
    ordered = np.sort(np.where(valid, index, np.iinfo(np.int64).max), axis=1)
    both = valid.sum(axis=1)[:, None] > np.arange(1, index.shape[1])[None, :]
    repeated = (both & (ordered[:, 1:] == ordered[:, :-1])).any(axis=1)
    bad = np.flatnonzero(negative | repeated)
    if not bad.size:
        return
    i = int(bad[0])
    full_i, part_i = full_kv[i, : full_n[i]], partial_kv[i, : part_n[i]]
    if negative[i]:
        row = np.concatenate([full_i, part_i])
        raise ValueError(f"plan lists a negative key tile index for query tile {i}: {row}")
    raise ValueError(
        f"plan lists a key tile twice for query tile {i} (full {full_i}, partial "
        f"{part_i}); each tile must be either full or partial once"
    )


def _reference_build_visit_slots(
    full_kv: np.ndarray,
    full_count: np.ndarray,
    partial_kv: np.ndarray,
    partial_count: np.ndarray,
    *,
    variant: str,
    tokens: int,
    block_kv: int,
) -> VisitSlots:
    """Reference for ``build_visit_slots`` (one Python iteration per query tile); kept for tests."""
    num_q_tiles, full_n, part_n = _validated(
        full_kv, full_count, partial_kv, partial_count, variant
    )
    full_kv = np.asarray(full_kv, np.int64)
    partial_kv = np.asarray(partial_kv, np.int64)

    rows_index: list[np.ndarray] = []
    rows_masked: list[np.ndarray] = []
    for i in range(num_q_tiles):
        full_i = full_kv[i, : full_n[i]]
        part_i = partial_kv[i, : part_n[i]]
        index = np.concatenate([full_i, part_i])
        masked = np.concatenate([np.zeros(full_i.size, bool), np.ones(part_i.size, bool)])
        if index.size and index.min() < 0:
            raise ValueError(f"plan lists a negative key tile index for query tile {i}: {index}")
        if np.unique(index).size != index.size:
            raise ValueError(
                f"plan lists a key tile twice for query tile {i} (full {full_i}, partial "
                f"{part_i}); each tile must be either full or partial once"
            )
        order = np.argsort(index, kind="stable")
        rows_index.append(index[order])
        rows_masked.append(masked[order])

    slots = max(1, max(row.size for row in rows_index))
    max_index = max((int(row.max()) for row in rows_index if row.size), default=0)
    num_kv_tiles = max(math.ceil(tokens / block_kv), max_index + 1)
    kv_index = np.zeros((num_q_tiles, slots), np.int32)
    masked = np.zeros((num_q_tiles, slots), np.int32)
    for i, (index, flag) in enumerate(zip(rows_index, rows_masked, strict=True)):
        if variant == "b1":
            flag = np.ones_like(flag)
        # Padded keys get zero weight only on the masked path.
        flag = flag | ((index + 1) * block_kv > tokens)
        n = index.size
        if n:
            kv_index[i, :n] = index
            masked[i, :n] = flag
            kv_index[i, n:] = index[-1]
            masked[i, n:] = flag[-1]
    return VisitSlots(
        kv_index=kv_index.reshape(-1),
        masked=masked.reshape(-1),
        count=np.array([row.size for row in rows_index], np.int32),
        slots=slots,
        num_q_tiles=num_q_tiles,
        num_kv_tiles=num_kv_tiles,
    )
