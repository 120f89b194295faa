"""``python -m evalharness.bench.seed_calibration``: our time estimate beside the seed's measurements.

For ``experiment=seed_720p``, ``seed_1080p`` and ``seed_1440p`` on ``tpu-v6e-8`` (14B, 40 steps,
8 chips, bf16, the seed's tiles, aggressive schedule at the kernel table's 38.87%), the dry run's
time estimate (``evalharness.admission.estimate_run_time``; nothing is compiled) gives the dense
and B3 attention call, the dense and sparse loops, the speedup and the attention share of a dense
step, printed beside the seed's figures (``evalharness.estimates.seed_measurements``) with the
difference. The rates come from ``evalharness.estimates.time_rates``: fitted at 720p, so the
1080p and 1440p rows are the check. Prints a Markdown table; allocates nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from hydra import compose, initialize_config_dir

from evalharness.admission import checkpoint_optional, estimate_run_time
from evalharness.assembly import platform_choices
from evalharness.bench.dry_runs import CONF_DIR
from evalharness.config import register_configs, to_config
from evalharness.estimates import (
    SEED_ATTENTION_SHARE,
    SEED_DENSE_LOOP_S,
    SEED_KERNEL_MS,
    SEED_SPARSE_LOOP_S,
    SEED_SPEEDUP,
    get_target,
    rates_for,
)
from evalharness.formatting import markdown_table
from models.config import get_transformer_config

RESOLUTIONS = ("720p", "1080p", "1440p")
# What the calibration test holds the estimate to (issue 25): speedups within 15%, per-call
# attention times within 20%.
SPEEDUP_BAND, CALL_BAND = 0.15, 0.20


def predict(resolution: str) -> dict[str, float]:
    """Our estimate of the seed's setting at ``resolution``."""
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        raw = compose("config", overrides=[f"experiment=seed_{resolution}"])
    target = get_target("tpu-v6e-8")
    cfg = platform_choices.resolve(to_config(checkpoint_optional(raw)), target.platform)
    tcfg = get_transformer_config(cfg.model.name)
    timing, work = estimate_run_time(cfg, tcfg, target, devices=cfg.parallel.sequence)
    rates = rates_for(target)
    attention = timing.seconds["self-attention"]["dense"]
    dense_call = attention / tcfg.num_layers
    b3_call = dense_call * work.executed / rates.variant_efficiency.get(work.variant, 1.0)
    dense, sparse = timing.loop_seconds("dense"), timing.loop_seconds("sparse")
    return {
        "dense_call_ms": 1e3 * dense_call,
        "b3_call_ms": 1e3 * b3_call,
        "dense_s": dense,
        "sparse_s": sparse,
        "speedup": dense / sparse,
        "share": attention / timing.step_seconds["dense"],
    }


def rows() -> list[dict[str, Any]]:
    """One row per resolution: the seed's figure, ours, and the difference."""
    out = []
    for res in RESOLUTIONS:
        ours = predict(res)
        seed = {
            "dense_s": SEED_DENSE_LOOP_S[res],
            "sparse_s": SEED_SPARSE_LOOP_S[res],
            "speedup": SEED_SPEEDUP[res],
            "share": SEED_ATTENTION_SHARE[res],
        }
        if res == "720p":  # the kernel table was measured at 720p only
            seed |= {"dense_call_ms": SEED_KERNEL_MS["b0"], "b3_call_ms": SEED_KERNEL_MS["b3"]}
        row: dict[str, Any] = {"res": res}
        for key, value in ours.items():
            measured = seed.get(key)
            diff = "" if measured is None else f" ({value / measured - 1:+.0%})"
            shown = f"{100 * value:.1f}%" if key == "share" else f"{value:,.2f}"
            before = (
                ""
                if measured is None
                else (f"{100 * measured:.1f}% / " if key == "share" else f"{measured:,.2f} / ")
            )
            row[key] = f"{before}{shown}{diff}"
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    """Prints the comparison (Markdown)."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    table = rows()
    titles = {
        "res": "res",
        "dense_call_ms": "dense call ms seed / ours",
        "b3_call_ms": "B3 call ms seed / ours",
        "dense_s": "dense loop s seed / ours",
        "sparse_s": "sparse loop s seed / ours",
        "speedup": "speedup seed / ours",
        "share": "attention share seed / ours",
    }
    print(markdown_table(table, [(t, k, "{}") for k, t in titles.items()]))
    print(
        "\nRates (fitted at 720p; 1080p and 1440p are the check):"
        + "".join(f"\n- {c}: {s}" for c, s in rates_for(get_target("tpu-v6e-8")).sources.items())
    )
    print(
        "\nThe seed's attention shares (its Table 1) disagree with its own kernel and end-to-end "
        "tables (40 x 78.70 ms is 82% of its 3.84 s dense step at 720p); the estimate follows the "
        "kernel and end-to-end tables."
    )


if __name__ == "__main__":
    main()
