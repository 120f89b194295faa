"""What one lent TPU v5e measured (2026-12-07, JAX 0.10.2, libtpu 0.0.42.1): the figures a v5e's
time estimates are fitted to and checked against.

Sources (the JSON that ``tests/evalharness/estimates/test_v5e_rates.py`` checks these against):

- ``docs/measurements/tpu-v5e-schedules-720p-routing-kernel.json``: the schedule benchmark at Wan
  2.1 1.3B's shapes with random weights, 720p (75,600 tokens, 12 heads x 128), CFG batch 2, bf16,
  2 steps, medians of 3 interleaved runs: the dense loop (splash 1,024 x 2,048 x 512), the
  aggressive loop (every call sparse, b3 3,328 x 1,536, operands in place and unpadded, routing
  and every block's cross-attention as Pallas kernels), and, timed alone in the same process,
  the dense attention call and the aggressive band kernel;
- the same benchmark at 480p with 4 steps (``tpu-v5e-schedules-480p-4-steps-routing-kernel.json``):
  the check;
- the kernel table at the seed's 720p call (``tpu-v5e-kernel-table-720p.json``): b1, b2 and b3
  at 38.87% of pairs, operands in place, which gives b1's and b2's time relative to b3's.
"""

from __future__ import annotations

# Wan 2.1 1.3B at 720p on one v5e: the loops (ms, 2 steps) and one attention call (ms).
V5E_SCHEDULES_720P = {
    "steps": 2,
    "tokens": 75_600,
    "batch": 2,
    "heads": 12,
    "head_dim": 128,
    "dense_loop_ms": 31_890.68,
    "aggressive_loop_ms": 14_975.85,
    "aggressive_kept": 0.249828,
    "dense_attention_ms": 437.494,
    "aggressive_band_kernel_ms": 123.901,
}
# The same at 480p (32,760 tokens), 4 steps: what the 720p fit is checked against.
V5E_SCHEDULES_480P = {
    "steps": 4,
    "tokens": 32_760,
    "dense_loop_ms": 15_109.05,
    "aggressive_loop_ms": 9_747.24,
}
# The kernel table at the seed's 720p call ([2, 75,600, 5, 128] bf16, 38.87% of pairs), ms.
V5E_KERNEL_MS = {"b1": 92.94, "b2": 89.41, "b3": 77.10}
