"""The report's section against the seed: our speedups, attention shares and kernel times beside
the seed's 1.28/1.49/1.69x, 55.5/72.5/88.2% and 78.70/32.76 ms, from fake runs as MLflow gives
them; the experiment's settings as params a run logs."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

from evalharness.bench.run_config import config_or_exit
from evalharness.config import to_config, to_plain_dict
from evalharness.tracking import flatten
from reports.build import _markdown
from reports.seed_table import (
    end_to_end_rows,
    experiment_setting,
    kernel_row,
    seed_runs,
    seed_section,
)
from reports.sources import ReportRun
from tests.helpers.harness_config import small_config

MACHINE = {"host": "tpu-vm", "device_kind": "TPU v6 lite", "device_platform": "tpu"}


def _harness(res: str, start: int, *, params: dict | None = None, **metrics: float) -> ReportRun:
    """A 14B harness run at ``res`` in the seed experiment's setting (``params`` over it)."""
    tags = {"model": "wan2.1-t2v-14b", "resolution": res, "schedule": "aggressive", **MACHINE}
    logged = {**experiment_setting(res), **(params or {})}
    return ReportRun(f"run-{res}-{start}", f"14b-{res}-{start}", logged, metrics, tags, start)


def _bench(kind: str, params: dict, metrics: dict, tags: dict | None = None) -> ReportRun:
    all_tags = {"bench": kind, "backend": "pallas_tpu", **MACHINE, **(tags or {})}
    return ReportRun(f"bench-{kind}", kind, params, metrics, all_tags, 1)


def test_the_experiment_settings_are_params_a_seed_run_logs(tmp_path: Path):
    for res in ("720p", "1080p", "1440p"):
        cfg = small_config(tmp_path, f"experiment=seed_{res}", small=False)
        params = {k: str(v) for k, v in flatten(to_plain_dict(to_config(cfg))).items()}
        setting = experiment_setting(res)
        assert setting["resolution.name"] == res and setting["schedule.name"] == "aggressive"
        assert "target" not in setting and "max_minutes" not in setting  # not what is measured
        assert {k: params.get(k) for k in setting} == setting, res


def test_our_runs_stand_beside_the_seed_per_resolution():
    runs = [
        _harness("720p", 5, speedup=1.31, dense_median_s=150.0, sparse_median_s=114.5),
        # newer, but with other steps: the run in the experiment's setting is the one shown
        _harness("720p", 9, params={"steps": "20"}, speedup=1.5),
        _harness("1080p", 6, params={"steps": "20"}, speedup=1.4, dense_median_s=340.0),
        _bench(
            "attention_share",
            {},
            {"720p.attention_share": 0.80},
            {"model": "wan2.1-t2v-14b", "resolution": "720p"},
        ),
    ]
    rows = {row["resolution"]: row for row in end_to_end_rows(runs)}
    assert list(rows) == ["720p", "1080p", "1440p"]
    first = rows["720p"]
    assert first["speedup"] == "1.28x / 1.31x (+2%)"
    assert first["dense"] == "153.5 / 150.0 (-2%)" and first["sparse"] == "119.9 / 114.5 (-4%)"
    assert first["share"] == "55.5% / 80.0% (+44%)"
    assert first["setting"] == "the seed's" and first["run"].startswith("14b-720p-5 (tpu-vm")
    assert rows["1080p"]["speedup"] == "1.49x / 1.40x (-6%)"
    assert rows["1080p"]["setting"] == "steps=20" and rows["1080p"]["share"] == "72.5% / -"
    assert rows["1440p"]["speedup"] == "1.69x / -" and rows["1440p"]["run"] == "-"
    assert set(seed_runs(runs)) == {"720p", "1080p"}


def test_the_kernel_at_the_seed_shape_is_read_from_the_kernel_table():
    shape = {"tokens": "75600", "heads": "10", "head_dim": "128", "dtype": "bfloat16"}
    shape |= {"block_q": "3328", "block_kv": "1536", "backend": "pallas_tpu"}
    other = _bench("kernel_table", {**shape, "tokens": "320"}, {"b3.median_ms": 0.1})
    assert kernel_row([other]) is None
    runs = [other, _bench("kernel_table", shape, {"splash.median_ms": 80.1, "b3.median_ms": 31.0})]
    row = kernel_row(runs)
    assert row["dense"] == "78.70 / 80.10 (+2%) (splash)"
    assert row["b3"] == "32.76 / 31.00 (-5%)"
    assert row["shape"].startswith("75600 tokens, 10 heads x 128, bfloat16, tiles 3328 x 1536")
    # The kernel benchmark records the run's call: 2 samples of 5 heads per device.
    runs.append(_bench("kernel_table", {**shape, "heads": "5", "batch": "2"}, {"b3.median_ms": 1}))
    assert kernel_row(runs[::-1])["shape"].startswith("75600 tokens, 2 x 5 heads x 128, bfloat16")


def test_the_section_appears_only_with_seed_runs_and_says_what_is_missing():
    tiny = ReportRun(
        "t", "tiny-planted", {}, {"speedup": 1.2}, {"model": "tiny-planted", "schedule": "balanced"}
    )
    assert seed_section([tiny]) == []
    text = "\n".join(seed_section([tiny, _harness("1440p", 3, speedup=1.7)]))
    assert "## Against the seed's measurements" in text
    assert "| 1440p | 1.69x / 1.70x (+1%) |" in text
    assert "No 14B attention share measured: `python -m evalharness.bench.attention_share" in text
    assert "No kernel table at the seed's shape" in text


def test_the_missing_measurements_name_commands_that_parse_and_compose():
    tiny = ReportRun("t", "tiny-planted", {}, {}, {"model": "tiny-planted"})
    text = "\n".join(seed_section([tiny, _harness("1440p", 3, speedup=1.7)]))
    commands = re.findall(r"`python -m (\S+) ([^`]*)`", text)
    assert {module for module, _ in commands} == {
        "evalharness.bench.attention_share",
        "evalharness.bench",
    }
    for module, args in commands:
        name = module + ".__main__" if module == "evalharness.bench" else module
        parser = importlib.import_module(name)._parser()
        overrides = parser.parse_args(shlex.split(args)).overrides  # exits 2 on a stale flag
        assert config_or_exit(parser, overrides, resolve=False).resolution.name == "720p"


def test_the_report_page_carries_the_section_after_the_verdict():
    runs = [_harness("720p", 5, speedup=1.31, dense_median_s=150.0, sparse_median_s=114.5)]
    markdown, _ = _markdown(runs, "test", [], {}, [])
    assert markdown.index("## Against the seed's measurements") < markdown.index("## Figures")
    assert "1.28x / 1.31x (+2%)" in markdown
