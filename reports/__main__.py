"""``python -m reports``: the seed's tables and figures regenerated from MLflow (see reports.cli)."""

import sys

from reports.cli import main

sys.exit(main())
