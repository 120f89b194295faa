"""What the seed write-up measured on TPU v6e: the figures our estimates are checked against.

Source: the seed write-up (``shared/seeds/``), Table 1: the share of a Wan 2.1 14B transformer
block's time spent in self-attention, 81 frames, per resolution.
"""

from __future__ import annotations

SEED_ATTENTION_SHARE = {"720p": 0.555, "1080p": 0.725, "1440p": 0.882}
SEED_SETUP = "Wan 2.1 14B, 81 frames, TPU v6e (seed Table 1)"
