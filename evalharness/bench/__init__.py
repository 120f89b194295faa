"""Benchmarks, each a ``python -m evalharness.bench[.<name>]`` command (docs/benchmarks.md). They
live with the harness because they need the model, the resolution presets and matplotlib, none of
which ``kernels/`` may import. Nothing imports the commands; the reports read benchmark runs
through :func:`metric_name`.
"""

from evalharness.bench.mlflow_record import metric_name

__all__ = ["metric_name"]
