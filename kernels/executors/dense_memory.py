"""Memory model of the dense executors: per-call temporaries beyond q, k, v and out (preflight).

Every figure is bytes of device memory (HBM on a TPU or GPU) one attention call allocates besides
its inputs and output, for q, k, v of shape [batch, tokens, heads, head_dim]. B, H, N, D below are
those sizes, s the input dtype's bytes.

- "dot_product_attention", "reference" (grow as N^2): float32 logits [B, H, N, N] and the float32
  probabilities computed from them, 2 * B*H*N^2*4, plus O(N*D) float32 row statistics and output
  before the cast, B*H*N*(D + 2)*4. Compiled on CPU both match this within 3% (the logits and
  probabilities are live together when the probabilities are computed).
- "b0" on backend "xla" (linear in N): ``lax.scan``s over key tiles (``kernels.executors.
  xla_blocksparse``), each step handling r query tiles at once and w listed key tiles as one
  matmul: w from ``wide_step_tiles`` (at most the key tiles), r from ``query_tiles_per_step``
  (B*H*r*BQ*w*BKV float32 scores near 2^21, at least one tile). Per step: float32 scores and
  probabilities [B, H, r*BQ, w*BKV] (2 * B*H*r*BQ*w*BKV*4), twice when N is not a multiple of BKV
  (the last, padded key tile is scanned masked, in a scan with its own step buffers), the
  probabilities cast to v's dtype when narrower (B*H*r*BQ*w*BKV*s), the gathered K and V tiles
  (2 * B*H*r*w*BKV*D*s), the float32 P V update and the running max, sum and accumulator
  (B*H*r*BQ*(2*D + 3)*4); the float32 outputs in tile order (B*H*Nq*D*4, Nq = N padded to BQ),
  twice when the query tiles are scanned in chunks (the map's stacked outputs); layout copies:
  heads-leading, padded q and tile-first k, v (B*H*(Nq + 2*Nkv)*D*s). An estimate for planning,
  not XLA's buffer assignment: compiled on CPU (batch 1-2, 1,024-16,128 tokens, 2-8 heads, tiles
  128-768, float32 and bfloat16) the measured temporaries were 0.63-0.95x of it
  (``tests/kernels/test_dense_controls.py`` holds one case to 25%).
- "xla_flash" (linear in N; ``kernels.executors.xla_flash``, always its own chunks BQ x BKV of
  ``flash_blocks``, as the dense attend runs it): a ``lax.map`` over query chunks, each scanning
  key blocks. Per step: float32 scores and probabilities [B, H, BQ, BKV] (2 * B*H*BQ*BKV*4; the
  rule keeps B*H*BQ*BKV near 2^21; inside the loops XLA often overwrites the scores), the
  probabilities cast to v's dtype when narrower
  (B*H*BQ*BKV*s), one K and one V block and the query chunk ((2*BKV + BQ)*B*H*D*s), the float32
  P V update and the carried running max, sum and accumulator (B*H*BQ*(2*D + 2)*4); the map's
  stacked float32 output (B*H*Nq*D*4, Nq = N padded to BQ); layout copies: heads-leading, padded
  q and heads-leading k, v in float32 (B*H*(Nq + 2*N)*D*4: XLA:CPU computes bfloat16 matmuls in
  float32, so it keeps float32 copies), and for bfloat16 inputs the float32 output before the
  cast (B*H*N*D*4). Compiled on CPU (batch 1-2, 300-32,760 tokens, 2-8 heads, float32 and
  bfloat16) the measured temporaries were 0.36-0.90x of it: 0.66-0.90x from 1,024 tokens up, the
  low end at a few hundred tokens, where one step's buffers (a few MB) dominate
  (``tests/kernels/test_xla_flash.py``).
- "b0" on backends "pallas_tpu" and "pallas_gpu", "splash" (linear in N): the online-softmax state
  (running max, sum, float32 accumulator) and the score tiles stay on chip (VMEM on a TPU,
  registers and shared memory on a GPU), not in HBM; what HBM holds are copies of q, k, v and of
  the output, plus block tables of a few KiB. Splash and the Pallas GPU kernel copy them
  heads-leading and padded to the tiles, about 4 * B*H*Np*D*s (Np: N padded to the tiles; for
  b0, q and out to BQ, k and v to BKV). The Pallas TPU kernel does not pad
  (``kernels.executors.pallas_tpu``): reading in place it holds q's scaled copy and k and v laid
  out as [B, N, H*D], 3 * B*H*N*D*s (compiled for v6e: within 128 KiB); with heads-leading
  copies (head_dim 64) 4 * B*H*N*D'*s, where D' = 128 because a row of 64 fills a 128-lane row.
- "cudnn" (linear in N): cuDNN's fused kernel keeps scores on chip and takes the [B, N, H, D]
  layout directly; its output comes back heads-leading, so at most one relayout copy B*H*N*D*s.
  cuDNN's own workspace is chosen at compile time and is not modelled (small next to the
  tensors: an inference forward keeps no softmax statistics).
"""

from __future__ import annotations

from kernels.executors.pallas_tpu_operands import LANES, reads_in_place
from kernels.executors.splash_tiles import splash_tiles
from kernels.executors.xla_flash import FLASH_SCORE_ELEMENTS, flash_blocks
from kernels.executors.xla_scan_steps import query_tiles_per_step, wide_step_tiles
from kernels.plans.block_sizes import BlockSizes, auto_block_sizes
from kernels.registry import TILED_BACKENDS, executor_names

# Dense executors whose temporaries grow as N^2 and those that stay linear in N.
QUADRATIC_EXECUTORS = executor_names(dense=True, memory="quadratic")
LINEAR_EXECUTORS = executor_names(dense=True, memory="linear")
MEMORY_BACKENDS = TILED_BACKENDS
_F32 = 4


def grows_quadratically(executor: str) -> bool:
    """Whether ``executor``'s temporaries grow as tokens^2 (materialised [B, H, N, N] logits).

    Args:
        executor: a concrete dense executor ("b0", "splash", "cudnn", "xla_flash",
            "dot_product_attention", "reference"); "auto" must be resolved first
            (``dense_controls``).

    Returns:
        True for "dot_product_attention" and "reference".

    Raises:
        ValueError: on "auto" or an unknown name.
    """
    _check_executor(executor)
    return executor in QUADRATIC_EXECUTORS


def _check_executor(executor: str) -> None:
    if executor not in (*QUADRATIC_EXECUTORS, *LINEAR_EXECUTORS):
        hint = " (resolve 'auto' with dense_controls(platform) first)" if executor == "auto" else ""
        raise ValueError(
            f"executor={executor!r} has no memory model{hint}; use one of "
            f"{(*LINEAR_EXECUTORS, *QUADRATIC_EXECUTORS)}"
        )


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _b0_xla_bytes(b: int, h: int, n: int, d: int, s: int, tiles: BlockSizes) -> int:
    bq, bkv = tiles.block_q, tiles.block_kv
    nq, nkv = _round_up(n, bq), _round_up(n, bkv)
    width = wide_step_tiles(bq, bkv, b * h, nkv // bkv)  # listed tiles per step
    rows = query_tiles_per_step(FLASH_SCORE_ELEMENTS, b * h * bq * bkv * width, nq // bq)
    step_q, step_k = rows * bq, width * bkv  # query rows and keys of one step
    # Scores and probabilities of one step; a last, padded key tile is scanned masked, in a scan
    # with its own step buffers.
    scans = 2 if n % bkv else 1
    scores = 2 * b * h * step_q * step_k * _F32 * scans
    cast = b * h * step_q * step_k * s if s != _F32 else 0  # probabilities in v's dtype
    gathered = 2 * b * h * rows * step_k * d * s  # each query tile's K and V tiles
    update = b * h * step_q * d * _F32  # this step's P V before it is added to the accumulator
    state = b * h * step_q * (2 + d) * _F32  # running max, sum, accumulator
    # Float32 outputs in tile order before the heads move back; chunked, also the map's stack.
    outputs = b * h * nq * d * _F32 * (2 if rows < nq // bq else 1)
    layouts = b * h * (nq + 2 * nkv) * d * s  # heads-leading, padded q, k, v
    return scores + cast + gathered + update + state + outputs + layouts


def _xla_flash_bytes(b: int, h: int, n: int, d: int, s: int) -> int:
    chunks = flash_blocks(n, b, h)
    bq, bkv = chunks.block_q, chunks.block_kv
    nq = _round_up(n, bq)
    narrow = s < _F32
    scores = 2 * b * h * bq * bkv * _F32  # one step's scores and probabilities
    cast = b * h * bq * bkv * s if narrow else 0  # probabilities in v's dtype for P V
    blocks = (2 * bkv + bq) * b * h * d * s  # one K and V block, the query chunk
    step = b * h * bq * (2 * d + 2) * _F32  # this step's P V; running max, sum, accumulator
    stacked = b * h * nq * d * _F32  # the query chunks' float32 outputs
    # Heads-leading, padded q and heads-leading k, v: float32 on XLA:CPU also for bfloat16 inputs
    # (it computes their matmuls in float32), which then adds the float32 output before the cast.
    layouts = b * h * (nq + 2 * n) * d * _F32 + (b * h * n * d * _F32 if narrow else 0)
    return scores + cast + blocks + step + stacked + layouts


def dense_executor_temp_bytes(
    executor: str,
    *,
    batch: int,
    heads: int,
    tokens: int,
    head_dim: int,
    dtype_bytes: int,
    block_q: int | None = None,
    block_kv: int | None = None,
    backend: str = "xla",
) -> int:
    """Bytes one dense attention call allocates besides q, k, v and out (see the module model).

    Args:
        executor: "b0", "splash", "cudnn", "xla_flash", "dot_product_attention" or
            "reference".
        batch: B.
        heads: H.
        tokens: N.
        head_dim: D.
        dtype_bytes: bytes per element of q, k, v (2 for bfloat16, 4 for float32).
        block_q: query tile of "b0"; None takes the backend's default. Ignored by "splash"
            and "xla_flash", which the dense attend always runs with their own tiles and chunks.
        block_kv: key/value tile of "b0"; None takes the backend's default. Ignored as
            ``block_q`` is.
        backend: backend of "b0": "xla" (the scan; the default, and the larger estimate),
            "pallas_tpu" (state in VMEM) or "pallas_gpu" (state in registers and shared
            memory). Ignored by the other executors.

    Returns:
        The modelled temporaries in bytes.

    Raises:
        ValueError: on an unknown executor ("auto" included) or backend, or non-positive sizes.
    """
    _check_executor(executor)
    if backend not in MEMORY_BACKENDS:
        raise ValueError(f"backend={backend!r}; use one of {MEMORY_BACKENDS}")
    sizes = {"batch": batch, "heads": heads, "tokens": tokens, "head_dim": head_dim}
    for name, value in {**sizes, "dtype_bytes": dtype_bytes}.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive int")
    b, h, n, d, s = batch, heads, tokens, head_dim, dtype_bytes
    if executor in QUADRATIC_EXECUTORS:
        return 2 * b * h * n * n * _F32 + b * h * n * (d + 2) * _F32
    if executor == "cudnn":
        return b * h * n * d * s
    if executor == "xla_flash":
        return _xla_flash_bytes(b, h, n, d, s)
    if executor == "splash":  # its own tiles, as the dense attend runs it
        padded = splash_tiles(n, head_dim=d, itemsize=s).padded_tokens
        return 4 * b * h * padded * d * s
    tiles = auto_block_sizes(n, backend)
    tiles = BlockSizes(block_q or tiles.block_q, block_kv or tiles.block_kv)
    if backend == "pallas_tpu":  # unpadded, in place or heads-leading (module docstring)
        if reads_in_place(h, d):
            return 3 * b * h * n * d * s
        return 4 * b * h * n * _round_up(d, LANES) * s
    if backend == "pallas_gpu":
        # q and the output padded to BQ, k and v to BKV (``kernels.executors.pallas_gpu``).
        padded = 2 * _round_up(n, tiles.block_q) + 2 * _round_up(n, tiles.block_kv)
        return b * h * padded * d * s
    return _b0_xla_bytes(b, h, n, d, s, tiles)
