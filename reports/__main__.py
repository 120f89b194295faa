"""``python -m reports``: tables and figures across the harness's MLflow runs."""

import sys

from reports.runs_table import main

sys.exit(main())
