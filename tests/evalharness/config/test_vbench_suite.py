"""``prompts=vbench``: VBench's prompts read from the vbench distribution's own file, filtered by
dimension and sampled to a limit; refused, naming the install, when the distribution is missing."""

import json

import pytest

import evalharness.__main__ as cli_module
from evalharness import exit_codes
from evalharness import run as run_module
from evalharness.config import config_pairs, prompt_aliases, to_config, vbench_suite
from evalharness.config.pairs import load_prompts
from tests.helpers.harness_config import small_config

# The layout of vbench/VBench_full_info.json: a prompt may be listed under several dimensions.
ENTRIES = [
    {"prompt_en": "a red car", "dimension": ["color", "object_class"]},
    {"prompt_en": "a person is dancing", "dimension": ["human_action"]},
    {"prompt_en": "a blue bird", "dimension": ["color"]},
    {"prompt_en": "a red car", "dimension": ["overall_consistency"]},
    {"prompt_en": "a green apple", "dimension": ["color"]},
    {"prompt_en": "a yellow umbrella", "dimension": ["color"]},
]


@pytest.fixture
def vbench_installed(tmp_path, monkeypatch):
    """A ``vbench`` package on the path holding only its prompt file, as the wheel ships it."""
    package = tmp_path / "site" / "vbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "VBench_full_info.json").write_text(json.dumps(ENTRIES))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


@pytest.fixture
def vbench_missing(monkeypatch):
    monkeypatch.setattr(vbench_suite.importlib.util, "find_spec", lambda name: None)


def test_every_prompt_once_in_file_order(vbench_installed):
    assert load_prompts("vbench") == [
        "a red car",
        "a person is dancing",
        "a blue bird",
        "a green apple",
        "a yellow umbrella",
    ]


def test_a_dimension_and_a_fixed_evenly_spread_sample(vbench_installed):
    color = ["a red car", "a blue bird", "a green apple", "a yellow umbrella"]
    assert load_prompts("vbench", dimension="color") == color
    assert load_prompts("vbench", dimension="color", limit=2) == [color[0], color[3]]
    assert load_prompts("vbench", dimension="color", limit=3) == [color[0], color[2], color[3]]
    assert load_prompts("vbench", limit=99) == load_prompts("vbench")
    with pytest.raises(ValueError, match="'colour' is not a VBench dimension; .* color, human"):
        load_prompts("vbench", dimension="colour")
    with pytest.raises(ValueError, match="needs prompts=vbench"):
        load_prompts("smoke", dimension="color")
    assert len(load_prompts("smoke", limit=2)) == 2


def test_command_line_spelling_reaches_the_pairs(tmp_path, vbench_installed):
    args = ["prompts=vbench", "prompts.dimension=color", "prompts.limit=3", "seeds=[0,1]"]
    assert prompt_aliases(args)[1:3] == ["prompt_filter.dimension=color", "prompt_filter.limit=3"]
    cfg = to_config(small_config(tmp_path, *prompt_aliases(args)))
    pairs = config_pairs(cfg)
    assert [(p.prompt, p.seed) for p in pairs[:2]] == [("a red car", 0), ("a red car", 1)]
    assert len(pairs) == 6


def test_a_filter_without_a_suite_is_refused(tmp_path):
    cfg = to_config(small_config(tmp_path, "prompt_filter.limit=3"))
    with pytest.raises(ValueError, match="give prompts=<suite or file> too"):
        config_pairs(cfg)


def test_without_the_distribution_the_run_exits_2_naming_the_install(
    tmp_path, capsys, monkeypatch, vbench_missing
):
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(run_module, "build_components", forbidden)
    monkeypatch.setattr(run_module, "_open_run", forbidden)
    args = ["prompts=vbench", "prompts.dimension=color", "prompts.limit=3"]
    cfg = small_config(tmp_path, *prompt_aliases(args))
    with pytest.raises(SystemExit) as done:
        cli_module._run_job(cfg, multirun=False)
    assert done.value.code == exit_codes.REFUSED
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert "pip install --no-deps vbench==0.1.5" in err and "not installed" in err
