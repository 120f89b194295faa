"""Shared pytest configuration: CPU-only JAX, float32 matmuls at full precision."""

import os

# Tests always run on the CPU; a developer's accelerator must not change the numbers.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
