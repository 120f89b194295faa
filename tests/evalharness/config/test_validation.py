"""Settings checked before any work: names (with a "did you mean") and values."""

import pytest

from evalharness.config import check_overrides, to_config
from evalharness.config.overrides import unknown_key
from tests.helpers.harness_config import small_config


@pytest.mark.parametrize(
    ("arg", "suggestion"),
    [
        ("warm_run=1", "did you mean warm_runs?"),
        ("kernel.blockq=8", "did you mean kernel.block_q?"),
        ("gate.min_psnr=30", "did you mean gate.min_psnr_db?"),
        ("schedule.first_times=0.2", "did you mean schedule.first_times_fp?"),
        ("resolutoin=720p", "did you mean resolution?"),
    ],
)
def test_a_misspelt_setting_names_the_closest_one(arg, suggestion):
    problem = check_overrides([arg])
    assert problem is not None and suggestion in problem and repr(arg) in problem


@pytest.mark.parametrize(
    "args",
    [
        ["warm_runs=1", "model=tiny-planted", "model.checkpoint=/x", "kernel.block_q=8"],
        ["experiment=seed_720p", "schedule=aggressive", "schedule.first_times_fp=0.2"],
        ["+logger.tags.team=video", "logger.tags.team=video", "~noise_floor"],
        ["-m", "schedule=conservative,aggressive", "hydra/launcher=basic", "hydra.run.dir=x"],
        ["--cfg", "job", "gate.min_psnr_db=30", "parallel.sequence=2"],
    ],
)
def test_real_settings_and_hydras_own_syntax_pass(args):
    assert check_overrides(args) is None


def test_a_leaf_has_no_fields():
    assert "has no fields" in unknown_key("warm_runs.value")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("guidance_scale=-3", "guidance_scale=-3.0 must be a finite number >= 0"),
        ("guidance_scale=nan", "guidance_scale=nan must be a finite number >= 0"),
        ("seed=-1", "seed -1 is outside 0 .. 2**32 - 1"),
        ("seeds=[0,-2]", "seed -2 is outside"),
        ("prompt=", "prompt is empty"),
        ("prompt='   '", "prompt is empty"),
        ("max_minutes=0", "max_minutes=0 must be > 0"),
        ("max_minutes=nan", "max_minutes=nan is not a number"),
        ("max_minutes=inf", "max_minutes=inf is infinite"),
        ("gate.min_psnr_db=nan", "gate.min_psnr_db=nan is not a number"),
        ("gate.min_worst_frame_psnr_db=-inf", "gate.min_worst_frame_psnr_db=-inf is infinite"),
        ("gate.min_speedup=-1", "gate.min_speedup=-1 is negative; give a finite number >= 0"),
        ("gate.min_speedup=nan", "gate.min_speedup=nan is not a number"),
        ("schedule.name=a/b", "schedule.name='a/b' cannot name a folder"),
        ("schedule.name=..", "schedule.name='..' cannot name a folder"),
        ("crf=60", "crf=60 within 0 .. 51"),
        ("kernel.block_q=0", "kernel.block_q=0 must be positive"),
        ("warm_runs=0", "warm_runs=0 must both be >= 1"),
    ],
)
def test_values_no_run_can_use_are_refused_at_composition(tmp_path, override, message):
    with pytest.raises(ValueError) as error:
        to_config(small_config(tmp_path, override))
    assert message in str(error.value)


def test_an_empty_prompt_is_fine_with_a_prompt_suite(tmp_path):
    assert to_config(small_config(tmp_path, "prompt=", "prompts=smoke")).prompts == "smoke"


def test_cache_dir_follows_output_root_unless_set(tmp_path):
    cfg = to_config(small_config(tmp_path, "output_root=/data/runs", "~cache_dir"))
    assert cfg.cache_dir == "/data/runs/cache"


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (
            "gate.min_speedup=abc",
            "gate.min_speedup='abc' is not a valid value for gate.min_speedup",
        ),
        ("max_minutes=ten", "max_minutes='ten' is not a valid value for max_minutes"),
        ("schedule.density=x", "schedule.density='x' is not a valid value for schedule.density"),
        ("kernel.backend=cuda", "expected one of [auto, xla"),
        ("prompt=a<b", "the value of prompt cannot be read by Hydra's override grammar"),
        ("prompt=a>b", "the value of prompt cannot be read"),
    ],
)
def test_a_value_hydra_cannot_read_or_convert_names_its_key(arg, message):
    problem = check_overrides([arg])
    assert problem is not None and message in problem and repr(arg) in problem


@pytest.mark.parametrize(
    "arg",
    [
        "gate.min_speedup=1.5",
        "prompt='a<b'",
        "schedule.density=0.1,0.2",
        "cache_dir=${output_root}/c",
        "seeds=[0,1]",
        "steps=null",
    ],
)
def test_values_hydra_reads_pass_the_value_check(arg):
    assert check_overrides([arg]) is None


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("schedule=nonexistent", "no schedule named 'nonexistent'; the choices are aggressive, "),
        ("schedule=balanced,agressive", "did you mean schedule=aggressive?"),
        ("model=tiny-plant", "did you mean model=tiny-planted?"),
        ("resolution=4k", "the choices are 1080p, 1440p, 480p, 720p, cpu"),
    ],
)
def test_an_unknown_group_option_names_the_choices(arg, expected):
    problem = check_overrides([arg])
    assert problem is not None and expected in problem and repr(arg) in problem


def test_the_choices_are_the_groups_files_not_their_schemas():
    from evalharness.config.overrides import group_options

    assert group_options("schedule") == [
        "aggressive",
        "balanced",
        "conservative",
        "dense",
        "radial",
        "sta",
        "svg2_720p",
        "svg_720p",
    ]
    assert check_overrides(["-m", "schedule=glob(*)", "kernel=xla", "logger=none"]) is None


def test_a_search_path_adds_its_groups_options(tmp_path):
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "searched-s.yaml").write_text("name: searched-s\n")
    found = [f"hydra.searchpath=[file://{tmp_path}]", "schedule=searched-s"]
    assert check_overrides(found) is None
    assert "no schedule named 'searched-s'" in check_overrides(["schedule=searched-s"])
    wrong = [f"hydra.searchpath=[file://{tmp_path}]", "schedule=searched-x"]
    assert "did you mean schedule=searched-s?" in check_overrides(wrong)
    # A package search path is Hydra's to read.
    assert check_overrides(["hydra.searchpath=[pkg://somewhere.conf]", "schedule=x"]) is None
