"""``python -m evalharness.bench.seed_calibration``: our time estimate beside the seed's measurements.

For ``experiment=seed_720p``, ``seed_1080p`` and ``seed_1440p`` on ``tpu-v6e-8``, the dry run's
time estimate (``evalharness.admission.estimate_run_time``; nothing is compiled or allocated) of
the dense and B3 attention call, the loops, the speedup and the attention share of a dense step,
beside the seed's figures (``evalharness.estimates.seed_measurements``) with the difference. The
rates (``evalharness.estimates.time_rates``) are fitted at 720p: 1080p and 1440p are the check.
"""

from __future__ import annotations

import argparse

from evalharness.admission import checkpoint_optional, estimate_run_time
from evalharness.assembly import platform_choices
from evalharness.config import compose_run_config, to_config
from evalharness.estimates import (
    CONTRADICTION,
    SEED_RESOLUTIONS,
    SEED_TARGET,
    get_target,
    rates_for,
    seed_prediction,
    seed_row,
    seed_table,
)
from models.config import get_transformer_config


def predict(resolution: str) -> dict[str, float]:
    """Our estimate of the seed's setting at ``resolution``."""
    raw = compose_run_config([f"experiment=seed_{resolution}"])
    target = get_target(SEED_TARGET)
    cfg = platform_choices.resolve(to_config(checkpoint_optional(raw)), target.platform)
    tcfg = get_transformer_config(cfg.model.name)
    timing, work = estimate_run_time(cfg, tcfg, target, devices=cfg.parallel.sequence)
    return seed_prediction(timing, work, tcfg, rates_for(target))


def main(argv: list[str] | None = None) -> None:
    """Prints the comparison (Markdown), one row per resolution."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(seed_table([seed_row(res, predict(res)) for res in SEED_RESOLUTIONS]))
    print(
        "\nRates (fitted at 720p; 1080p and 1440p are the check):"
        + "".join(f"\n- {c}: {s}" for c, s in rates_for(get_target(SEED_TARGET)).sources.items())
    )
    print("\n" + CONTRADICTION)


if __name__ == "__main__":
    main()
