"""Reports show data, never read paths from data: tags, params, run names and artifacts that
carry Markdown or HTML (an image line pointing at a local file, a script) are shown literally,
and the HTML page embeds images from its own figures folder only."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalharness.evidence.results import write_report, write_suite_report
from evalharness.formatting import markdown_code, markdown_table, markdown_text
from reports.build import build_report
from reports.html_page import render_html
from reports.sources import load_runs
from reports.untrusted import untrusted_markdown

SECRET = b"PLANTED-SECRET-0f3c9a"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def hostile(secret: Path) -> str:
    """A value that, unescaped, would be an image line of ``secret``, raw HTML and a table cell."""
    return f"ok\n![x]({secret})\r\n<img src=x onerror=alert(1)>|cell`code`*em*\u2028# head"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.png"  # an image suffix: the page must still refuse it
    path.write_bytes(SECRET)
    return path


def _leaks(text: str) -> bool:
    """Whether the planted file's bytes are in ``text``, plain or base64 at any alignment."""
    encoded = [base64.b64encode(b"ab"[:k] + SECRET).decode()[4:-4] for k in range(3)]
    return SECRET.decode() in text or any(e and e in text for e in encoded)


def _embedded(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:[^;]+;base64,([^"]+)"', page)]


def _assert_inert(markdown: str, page: str, value: str) -> None:
    """No hostile markup survives: no image line but the report's figures, no raw HTML from the
    value, its text escaped in the Markdown (or literal in a code span it cannot leave) and shown
    in the page."""
    assert markdown_code(value) in markdown  # the verdict's sentence names the schedule as code
    markdown = markdown.replace(markdown_code(value), "")
    for line in markdown.splitlines():
        assert not line.startswith("![") or re.match(r"^!\[.*\]\(figures/[\w.-]+\.png\)$", line)
    assert not re.search(r"(?<!\\)<img src=x", markdown) and "<img src=x" not in page
    assert markdown_text(value) in markdown
    assert "onerror=alert(1)&gt;|cell<code>code</code>" not in page  # the code span is escaped
    assert "&lt;img src=x onerror=alert(1)&gt;|cell`code`*em*" in page
    assert not _leaks(markdown) and not _leaks(page)
    assert all(image.startswith(b"\x89PNG") for image in _embedded(page))


def test_markdown_text_escapes_every_markup_character_and_line_break():
    text = markdown_text("a\nb\r\nc\u2028d ![x](/p) <s> | `c` *e* #h &amp; ~~s~~ \\ [l]")
    assert text == r"a b c d \!\[x\](/p) \<s\> \| \`c\` \*e\* \#h \&amp; \~\~s\~\~ \\ \[l\]"
    table = markdown_table([{"v": "a|b\nc"}], [("v", "v", "{}")], escape=True)
    assert table.splitlines()[-1] == r"| a\|b c |"


def test_the_page_embeds_only_images_from_its_figures_folder(tmp_path, secret):
    folder = tmp_path / "report"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "ok.png").write_bytes(PNG)
    (folder / "figures" / "link.png").symlink_to(secret)
    refused = [
        str(secret),
        "../secret.png",
        "figures/../../secret.png",
        "figures/link.png",
        f"file://{secret}",
        "figures/missing.png",
        "report.md",
    ]
    (folder / "report.md").write_text("x")
    markdown = "\n\n".join(f"![c{n}]({src})" for n, src in enumerate(refused))
    page = render_html(markdown + "\n\n![ok](figures/ok.png)", folder, "t")
    assert _embedded(page) == [PNG]
    assert page.count('class="refused"') == len(refused) and not _leaks(page)


def test_artifact_markdown_keeps_tables_but_not_images_or_html(secret):
    text = f"| a | b |\n|---|---|\n| ![x]({secret}) | <script> |\n<details>\n\\![ok](y)"
    safe = untrusted_markdown(text)
    assert safe.splitlines()[:2] == ["| a | b |", "|---|---|"]
    assert f"\\![x]({secret})" in safe and "\\<script>" in safe and "<details>" in safe
    assert "\\![ok](y)" in safe  # already escaped: left as it is


def _log(client, experiment_id: str, name: str, tags: dict, params: dict, metrics: dict) -> str:
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    for key, value in params.items():
        client.log_param(run.info.run_id, key, value)
    for key, value in metrics.items():
        client.log_metric(run.info.run_id, key, value)
    return run.info.run_id


def test_a_report_from_a_hostile_store_inlines_no_file(tmp_path, secret):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("hostile", artifact_location=str(tmp_path / "art"))
    value = hostile(secret)
    tags = {k: value for k in ("host", "device_kind", "jax_version", "backend", "git_commit")}
    harness = {**tags, "schedule": value, "resolution": value, "model": value}
    params = {k: value for k in ("steps", "schedule.density", "gate.on", "gate.min_psnr_db")}
    metrics = {"speedup": 1.5, "psnr_db": 30.0, "pairs": 1.0}
    ids = [_log(client, experiment, value, {**harness, "run_kind": "harness"}, params, metrics)]
    ids.append(_log(client, experiment, value, {**tags, "bench": "tile_sweep"}, params, {}))
    ids.append(
        _log(client, experiment, value, {**tags, "run_kind": "search", "search": value}, {}, {})
    )
    table = f"| a |\n|---|\n| ![x]({secret}) |\n![x]({secret})\n<img src=x onerror=alert(1)>"
    (tmp_path / "tile_sweep.md").write_text(table)
    client.log_artifact(ids[1], str(tmp_path / "tile_sweep.md"))
    (tmp_path / "front.md").write_text(table)
    summary = {"trials": value, "references_not_covered": [value]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    for name in ("front.md", "summary.json"):
        client.log_artifact(ids[2], str(tmp_path / name))
    for run_id in ids:
        client.set_terminated(run_id, "FINISHED")
    runs = load_runs(client, experiment="hostile")
    report = build_report(client, runs, tmp_path / "report", source=value)
    markdown, page = report.markdown.read_text(), report.html.read_text()
    _assert_inert(markdown, page, value)
    assert "\\![x]" in markdown  # the artifacts' image lines, escaped


def _cfg(prompt: str) -> SimpleNamespace:
    return SimpleNamespace(
        model=SimpleNamespace(name="tiny-planted"),
        resolution=SimpleNamespace(name="cpu"),
        schedule=SimpleNamespace(name="balanced"),
        prompt=prompt,
        prompts="smoke",
        seed=0,
        steps=2,
        sampler="unipc",
        guidance_scale=5.0,
        dtype="float32",
        gate=SimpleNamespace(
            min_psnr_db=None,
            min_speedup=None,
            min_worst_frame_psnr_db=None,
            on=SimpleNamespace(value="mean"),
        ),
    )


def test_the_run_folders_report_escapes_the_prompt(tmp_path, secret):
    value = hostile(secret)
    one = write_report(tmp_path, _cfg(value), {"psnr_db": 30.0}, []).read_text()
    assert f"Prompt: “{markdown_text(value)}”" in one
    pairs = [{"pair": 0, "seed": 0, "prompt": value, "psnr_db": 30.0}]
    suite = write_suite_report(tmp_path, _cfg(value), {"pairs": 1}, pairs, []).read_text()
    for text in (one, suite):
        assert not any(line.startswith("![") for line in text.splitlines())
        assert not re.search(r"(?<!\\)<img src=x", text)
    assert f"| {markdown_text(value)} |" in suite
