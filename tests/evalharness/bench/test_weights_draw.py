"""``python -m evalharness.bench.weights_draw`` on the tiny preset: every part timed, the new and
the old transformer draw compared bit for bit, the table printed and the JSON written."""

import json

import pytest

from evalharness.bench.weights_draw import main


@pytest.mark.slow  # compiles the tiny transformer's draw twice (about 20 s on 2 cores)
def test_the_weights_draw_benchmark_times_every_part_and_compares_the_recipes(tmp_path, capsys):
    out = tmp_path / "draw.json"
    args = ["--model", "tiny", "--layers", "2", "--scan-layers", "true", "--old"]
    assert main([*args, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["identical"] is True
    assert (result["model"], result["layers"], result["scan_layers"]) == ("tiny", 2, True)
    rows = {row["part"]: row for row in result["rows"]}
    assert list(rows) == ["transformer", "transformer_old", "vae", "prompt_encoder"]
    for part in ("transformer", "transformer_old"):
        split = rows[part]["trace_s"] + rows[part]["compile_s"] + rows[part]["run_s"]
        assert rows[part]["total_s"] == pytest.approx(split)
    assert all(row["total_s"] > 0 for row in rows.values())
    printed = capsys.readouterr().out
    assert "| transformer_old |" in printed and "bit-identical: True" in printed
