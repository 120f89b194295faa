"""``python -m evalharness.bench.dry_runs``: the dry run over models x resolutions x targets.

One row per (model, resolution, target): whether it fits, the per-device GiB of the main memory
components and the peak, the SMEM and VMEM of the Pallas TPU plans, the lowering, and the roofline
minutes of the whole comparison. Planned on this machine from abstract weights (see
``evalharness.admission.dry_run_report``); nothing real is allocated. With the ``tpu`` extra
installed, the TPU rows are compiled for the chip by libtpu (3-6 minutes each on 2 cores at
720p-1080p) and their memory is the TPU compiler's.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from evalharness.admission import EXPORT_PLATFORMS, checkpoint_optional, size_run
from evalharness.assembly import platform_choices
from evalharness.config import compose_run_config, to_config
from evalharness.estimates import GIB, get_target
from evalharness.formatting import markdown_table
from models.config import get_transformer_config

MODELS = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b")
RESOLUTIONS = ("720p", "1080p", "1440p")
TARGETS = ("tpu-v6e-1", "tpu-v6e-8", "h200")
_COMPONENTS = {
    "weights": "transformer weights",
    "text enc.": "text encoder",
    "block": "transformer",
    "attention": "attention executor",
    "routing": "routing",
    "VAE": "VAE decode",
}
# The rows of a table compiled for the chip (chip_compile=step) standing in for our model's.
_COMPILED = {"transformer": "denoising step (compiled)"}


def plan_row(model: str, resolution: str, target_name: str, overrides: list[str]) -> dict[str, Any]:
    """One dry run as a table row."""
    raw = compose_run_config([f"model={model}", f"resolution={resolution}", *overrides])
    target = get_target(target_name)
    cfg = platform_choices.resolve(to_config(checkpoint_optional(raw)), target.platform)
    start = time.perf_counter()
    devices = cfg.parallel.sequence or target.devices
    sizing = size_run(cfg, get_transformer_config(cfg.model.name), target, devices=devices)
    memory = sizing.memory
    worst = max(memory.arms, key=memory.peak)
    row: dict[str, Any] = {
        "model": model.removeprefix("wan2.1-t2v-"),
        "res": resolution,
        "target": target_name,
        "fits": "yes" if sizing.fits else "NO",
    }
    for title, component in _COMPONENTS.items():
        if component not in memory.rows:  # the compiled loop's table: its step row
            component = _COMPILED.get(component, component)
        row[title] = max(memory.rows.get(component, {}).values(), default=0) / GIB
    row["peak GiB"] = memory.peak(worst) / GIB
    model = sizing.model_memory
    row["model peak GiB"] = max(model.peak(a) for a in model.arms) / GIB if model else None
    row["compiled by"] = sizing.compiled_by or "-"
    row["HBM GiB"] = target.hbm_bytes / GIB
    smem = [b.smem_bytes for b in sizing.budgets.values()]
    vmem = [b.vmem_bytes for b in sizing.budgets.values()]
    row["SMEM KiB"] = max(smem) / 1024 if smem else None
    row["VMEM MiB"] = max(vmem) / 2**20 if vmem else None
    row["lowered"] = EXPORT_PLATFORMS.get(target.platform, "-") if sizing.lowering else "-"
    row["minutes"] = sizing.timing.total_minutes
    row["plan s"] = time.perf_counter() - start
    row["why not"] = "; ".join(p[:80] for p in sizing.problems) or (
        "" if memory.fits else f"memory ({memory.dominant(worst)})"
    )
    return row


def main(argv: list[str] | None = None) -> None:
    """Prints the dry-run table (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--resolutions", nargs="+", default=RESOLUTIONS)
    parser.add_argument("--targets", nargs="+", default=TARGETS)
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. schedule=aggressive")
    args = parser.parse_args(argv)
    rows = [
        plan_row(m, r, t, args.overrides)
        for m in args.models
        for r in args.resolutions
        for t in args.targets
    ]
    fmt = {"model": "{}", "res": "{}", "target": "{}", "fits": "{}", "lowered": "{}"}
    fmt |= {"compiled by": "{}"}
    fmt |= {"SMEM KiB": "{:,.1f}", "VMEM MiB": "{:,.1f}", "minutes": "{:,.1f}", "why not": "{}"}
    columns = [(k, k, fmt.get(k, "{:,.2f}")) for k in rows[0]]
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
