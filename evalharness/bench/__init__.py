"""Benchmarks: ``python -m evalharness.bench`` (kernels), ``python -m evalharness.bench.schedules``
(denoising time per sparsity schedule), ``python -m evalharness.bench.placement`` (sequence
parallelism), ``python -m evalharness.bench.memory``, ``python -m
evalharness.bench.attention_share``, ``python -m evalharness.bench.negative_controls`` (broken
sparse arms against the gate), ``python -m evalharness.bench.head_mass`` (each head's attention
mass inside the spatial and temporal bands) and ``python -m evalharness.bench.shapes_fidelity``
(the default model's video of held-out prompts, read back). They live with the harness because
they need the model, the resolution presets and matplotlib, none of which ``kernels/`` may import.

Nothing imports the commands; the reports read benchmark runs through :func:`metric_name`.
"""

from evalharness.bench.mlflow_record import metric_name

__all__ = ["metric_name"]
