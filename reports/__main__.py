"""``python -m reports``: the seed's tables and figures regenerated from MLflow (see reports.cli).

A failure nobody foresaw (a bug) keeps its traceback and exits 4, never 1, which means a missed
gate (``evalharness.exit_codes``).
"""

import sys
import traceback

from reports.cli import main

try:
    code = main()
except Exception:  # noqa: BLE001 - a bug: its traceback, then the contract's one error line
    traceback.print_exc()
    print("error: reports: failed while building the report (traceback above)", file=sys.stderr)
    code = 4
sys.exit(code)
