"""Benchmarks: ``python -m evalharness.bench`` (kernels), ``python -m evalharness.bench.schedules``
(denoising time per sparsity schedule) and ``python -m evalharness.bench.placement`` (sequence
parallelism). They live with the harness because they need the model, the resolution presets and
matplotlib, none of which ``kernels/`` may import.
"""
