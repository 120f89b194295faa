"""The gate: PSNR and speedup thresholds turned into a pass or fail and an exit code, on a
run just measured or (``python -m evalharness.gate``) on runs already in MLflow.
"""

from evalharness.gate.verdict import GateResult, check_gate

__all__ = ["GateResult", "check_gate"]
