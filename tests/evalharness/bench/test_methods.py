"""The method comparison table: rows from a sweep's folders, and its Pareto front."""

from __future__ import annotations

import json

from evalharness.bench.methods import main, method_rows, pareto_flags


def test_pareto_flags_keep_only_undominated_points():
    points = [(2.0, 30.0), (1.5, 35.0), (1.4, 34.0), (2.0, 29.0), (1.0, 35.0)]
    assert pareto_flags(points) == [True, True, False, False, False]


def _run(tmp_path, name, **metrics):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return {"schedule": name, "status": "FINISHED", "run_dir": str(run_dir)}


def test_rows_read_each_run_and_mark_the_front(tmp_path, capsys):
    common = dict(mask_density=0.4, schedule_kept_fraction=0.5, dense_median_s=2.0)
    entries = [
        _run(
            tmp_path,
            "svg_720p",
            schedule_method="svg",
            svg_sparsity=0.3,
            speedup=1.5,
            psnr_db=30.0,
            ssim_frames=0.97,
            sparse_median_s=1.3,
            **common,
        ),
        _run(
            tmp_path,
            "sta",
            schedule_method="sta",
            sta_window="2x2x1",
            sta_tile="6x8x8",
            speedup=1.2,
            psnr_db=29.0,
            ssim_frames=0.96,
            sparse_median_s=1.6,
            **common,
        ),
        _run(
            tmp_path,
            "radial",
            schedule_method="radial",
            radial_decay_factor=0.2,
            speedup=1.1,
            psnr_db=33.0,
            ssim_frames=0.99,
            sparse_median_s=1.8,
            lpips=0.05,
            **common,
        ),
        {"schedule": "broken", "status": "FAILED", "run_dir": str(tmp_path)},
    ]
    (tmp_path / "summary.jsonl").write_text("\n".join(json.dumps(e) for e in entries))
    rows = method_rows(tmp_path)
    assert [r["schedule"] for r in rows] == ["svg_720p", "sta", "radial"]
    assert [r["pareto"] for r in rows] == ["yes", "", "yes"]
    assert rows[1]["parameters"] == "window 2x2x1 tiles of 6x8x8"
    assert rows[2]["parameters"] == "decay_factor 0.2" and rows[2]["lpips"] == 0.05
    assert rows[0]["lpips"] is None
    assert main([str(tmp_path)]) == 0
    assert "| sta | sta | window 2x2x1" in capsys.readouterr().out


def test_a_folder_without_a_summary_is_refused(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "summary.jsonl" in err
