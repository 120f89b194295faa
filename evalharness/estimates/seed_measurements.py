"""What the seed write-up measured on TPU v6e: the figures our estimates are fitted to and checked
against.

Source: the seed write-up (``shared/seeds/``): Table 1 (the share of a Wan 2.1 14B transformer
block's time spent in self-attention, 81 frames), the kernel table (one v6e chip, bf16, 75,600
tokens, 10 heads x 128, tiles 3,328 x 1,536, sparse variants keeping 38.87% of pairs) and Table 3
with the resolution paragraph (end-to-end denoising, 81 frames, 40 steps, 8 chips, the aggressive
schedule: medians of three warm runs).
"""

from __future__ import annotations

SEED_ATTENTION_SHARE = {"720p": 0.555, "1080p": 0.725, "1440p": 0.882}
SEED_SETUP = "Wan 2.1 14B, 81 frames, TPU v6e (seed Table 1)"
# The kernel table: milliseconds per call (b0 is dense splash).
SEED_KERNEL_MS = {"b0": 78.70, "b1": 96.37, "b2": 54.12, "b3": 32.76}
SEED_KERNEL = {"tokens": 75_600, "heads": 10, "head_dim": 128, "kept": 0.3887}
# End-to-end denoising seconds (dense control, aggressive schedule) and the speedups it states.
SEED_DENSE_LOOP_S = {"720p": 153.50, "1080p": 683.0, "1440p": 2471.0}
SEED_SPARSE_LOOP_S = {"720p": 119.86, "1080p": 457.0, "1440p": 1461.0}
SEED_SPEEDUP = {"720p": 1.28, "1080p": 1.49, "1440p": 1.69}
# The write-up does not state its aggressive schedule's settings; ours (conf/schedule/aggressive:
# 10% dense warm-up steps, no dense layers), with the only kept fraction it states (its kernel
# table's), is what experiment=seed_* runs.
SEED_SCHEDULE = {"first_times_fp": 0.1, "first_layers_fp": 0.0, "kept": SEED_KERNEL["kept"]}
