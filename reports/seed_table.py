"""Our measurements beside the seed's: the section a report gets when the experiment holds runs
in the seed's setting (``experiment=seed_720p``, ``seed_1080p``, ``seed_1440p``).

The seed write-up measured Wan 2.1 14B on 8 TPU v6e chips (``evalharness.estimates``): speedups
of 1.28 / 1.49 / 1.69x end to end, attention shares of 55.5 / 72.5 / 88.2% at 720p / 1080p / 1440p,
and one 720p attention call of 78.70 ms dense (splash) and 32.76 ms B3. This section puts ours
beside them:

- end to end, per resolution, the newest harness run of the 14B model (one in the experiment's
  setting when there is one): speedup (against the fastest dense control), dense and sparse
  median loop seconds, and the settings in which it differs from the experiment's (read from
  ``conf/experiment/seed_<res>.yaml``, so a run with other steps or tiles says so);
- the attention share, from ``bench=attention_share`` runs of the 14B model at that resolution;
- the kernel at the seed's shape (75,600 tokens, ``bench=kernel_table``): dense and B3 ms.

Each cell reads ``seed / ours (difference)``; ``-`` where we have no measurement, with the
command that makes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from evalharness.bench import metric_name
from evalharness.config import CONF_DIR, load_resolution
from evalharness.estimates import (
    SEED_ATTENTION_SHARE,
    SEED_DENSE_LOOP_S,
    SEED_KERNEL_MS,
    SEED_SPARSE_LOOP_S,
    SEED_SPEEDUP,
)
from evalharness.formatting import markdown_table
from evalharness.metric_names import Metric
from reports.sources import ReportRun, of_kind

SEED_MODEL = "wan2.1-t2v-14b"
RESOLUTIONS = tuple(SEED_SPEEDUP)
EXPERIMENTS = CONF_DIR / "experiment"
# Keys of an experiment file that say where to plan or how long to allow, not what is measured.
_NOT_SETTINGS = ("max_minutes", "target")
DENSE_VARIANTS = ("splash", "b0")  # the seed's dense call is splash; our B0 stands in without it


def experiment_setting(resolution: str, folder: Path = EXPERIMENTS) -> dict[str, str]:
    """The settings ``experiment=seed_<resolution>`` fixes, as MLflow params spell them
    (``schedule.name``: aggressive, ``steps``: 40, ``kernel.block_q``: 3328, ...)."""
    raw = OmegaConf.to_container(OmegaConf.load(folder / f"seed_{resolution}.yaml"))
    setting: dict[str, str] = {}
    for entry in raw.pop("defaults", []):
        for key, value in entry.items() if isinstance(entry, dict) else ():
            setting[f"{key.removeprefix('override /')}.name"] = str(value)
    for key in _NOT_SETTINGS:
        raw.pop(key, None)

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, f"{prefix}{key}.")
            else:
                setting[f"{prefix}{key}"] = str(value)

    walk(raw, "")
    return setting


def _same(logged: str | None, wanted: str) -> bool:
    if logged == wanted:
        return True
    try:
        return logged is not None and float(logged) == float(wanted)
    except ValueError:
        return False


def differences(run: ReportRun, setting: Mapping[str, str]) -> list[str]:
    """``key=ours`` for each setting of the experiment the run did not use."""
    return [
        f"{key}={run.params.get(key, '?')}"
        for key, wanted in setting.items()
        if not _same(run.params.get(key), wanted)
    ]


def seed_runs(runs: Sequence[ReportRun]) -> dict[str, tuple[ReportRun, list[str]]]:
    """Per seed resolution, the newest 14B harness run in the experiment's setting (else the
    newest 14B harness run there), with its differences from the setting."""
    chosen: dict[str, tuple[ReportRun, list[str]]] = {}
    for run in of_kind(runs, "harness"):  # newest first
        res = run.tags.get("resolution")
        if run.tags.get("model") != SEED_MODEL or res not in RESOLUTIONS:
            continue
        diff = differences(run, experiment_setting(res))
        if res not in chosen or (chosen[res][1] and not diff):
            chosen[res] = (run, diff)
    return chosen


def _cell(seed: float | None, ours: float | None, fmt: str) -> str:
    """``seed / ours (+x%)``; a missing side is ``-``."""
    shown = "-" if ours is None else fmt.format(ours)
    if seed is None:
        return shown
    text = f"{fmt.format(seed)} / {shown}"
    return text if ours is None else f"{text} ({ours / seed - 1:+.0%})"


def _attention_share(runs: Sequence[ReportRun], res: str) -> float | None:
    """Our measured attention share of the 14B model at ``res``, newest first."""
    for run in of_kind(runs, "bench:attention_share"):
        if run.tags.get("model") == SEED_MODEL and run.tags.get("resolution") == res:
            share = run.metrics.get(f"{metric_name(res)}.attention_share")
            if share is not None:
                return share
    return None


def end_to_end_rows(runs: Sequence[ReportRun]) -> list[dict[str, Any]]:
    """One row per seed resolution: speedup, loop seconds and attention share, seed / ours."""
    chosen = seed_runs(runs)
    rows = []
    for res in RESOLUTIONS:
        run, diff = chosen.get(res, (None, []))
        m = run.metrics if run is not None else {}
        rows.append(
            {
                "resolution": res,
                Metric.SPEEDUP: _cell(SEED_SPEEDUP[res], m.get(Metric.SPEEDUP), "{:.2f}x"),
                "dense": _cell(SEED_DENSE_LOOP_S[res], m.get("dense_median_s"), "{:,.1f}"),
                "sparse": _cell(SEED_SPARSE_LOOP_S[res], m.get("sparse_median_s"), "{:,.1f}"),
                "share": _cell(SEED_ATTENTION_SHARE[res], _attention_share(runs, res), "{:.1%}"),
                "setting": "-" if run is None else ("the seed's" if not diff else ", ".join(diff)),
                "run": "-" if run is None else f"{run.name} ({run.machine})",
            }
        )
    return rows


def kernel_row(runs: Sequence[ReportRun]) -> dict[str, Any] | None:
    """The newest kernel-table run at the seed's shape (720p's 75,600 tokens): dense and B3 ms."""
    for run in of_kind(runs, "bench:kernel_table"):
        if run.params.get("tokens") != str(load_resolution("720p").video.tokens):
            continue
        name = next((v for v in DENSE_VARIANTS if f"{v}.median_ms" in run.metrics), None)
        dense = run.metrics.get(f"{name}.median_ms") if name else None
        p = run.params
        return {
            "dense": _cell(SEED_KERNEL_MS["b0"], dense, "{:.2f}") + f" ({name or 'none'})",
            "b3": _cell(SEED_KERNEL_MS["b3"], run.metrics.get("b3.median_ms"), "{:.2f}"),
            "shape": f"{p.get('tokens')} tokens, {_heads(p)} x {p.get('head_dim')}, "
            f"{p.get('dtype')}, tiles {p.get('block_q')} x {p.get('block_kv')}, "
            f"{p.get('backend', run.tags.get('backend', '?'))}",
            "run": f"{run.name} ({run.machine})",
        }
    return None


def _heads(params: dict[str, str]) -> str:
    """The call's heads: "10 heads", or "2 x 5 heads" when the call holds several samples (the
    seed's 10 heads are one guided step's 2 samples x 5 heads per device)."""
    batch = params.get("batch", "1")
    return (
        f"{params.get('heads')} heads" if batch == "1" else f"{batch} x {params.get('heads')} heads"
    )


_END_TO_END = (
    ("resolution", "resolution", "{}"),
    ("speedup seed / ours", Metric.SPEEDUP, "{}"),
    ("dense loop s seed / ours", "dense", "{}"),
    ("sparse loop s seed / ours", "sparse", "{}"),
    ("attention share seed / ours", "share", "{}"),
    ("differs from the experiment", "setting", "{}"),
    ("run", "run", "{}"),
)
_KERNEL = (
    ("dense call ms seed / ours", "dense", "{}"),
    ("B3 call ms seed / ours", "b3", "{}"),
    ("our shape", "shape", "{}"),
    ("run", "run", "{}"),
)


def seed_section(runs: Sequence[ReportRun]) -> list[str]:
    """The report's section, as Markdown lines; none without a 14B harness run at a seed
    resolution (the comparison would be the seed's figures alone)."""
    if not seed_runs(runs):
        return []
    lines = [
        "## Against the seed's measurements",
        "",
        "The seed: Wan 2.1 14B, 81 frames, 40 steps, 8 x TPU v6e, bf16, its aggressive schedule "
        "(38.87% of pairs), medians of three warm runs. Ours: the newest run per resolution "
        "(speedup against the fastest dense control, median loop seconds); `seed / ours "
        "(difference)`.",
        "",
        markdown_table(end_to_end_rows(runs), _END_TO_END, escape=True),
        "",
    ]
    if not any(r["share"].split(" / ")[-1] != "-" for r in end_to_end_rows(runs)):
        lines += [
            "*No 14B attention share measured: `python -m evalharness.bench.attention_share "
            "model=wan2.1-t2v-14b resolution=720p dtype=bfloat16 --mlflow` on a device that "
            "holds the whole 14B model (an H200; it refuses a 32 GB v6e chip).*",
            "",
        ]
    kernel = kernel_row(runs)
    if kernel is None:
        lines += [
            "*No kernel table at the seed's shape: `python -m evalharness.bench "
            "experiment=seed_720p --skip memory --mlflow` on a TPU.*",
            "",
        ]
    else:
        lines += [
            "One attention call at the seed's kernel shape (75,600 tokens, 10 heads x 128, "
            "bf16, 3,328 x 1,536 tiles, 38.87% of pairs):",
            "",
            markdown_table([kernel], _KERNEL, escape=True),
            "",
        ]
    return lines
