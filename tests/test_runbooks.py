"""The runbooks' commands stay runnable: every ``python -m ...`` line of ``docs/runbook-*.md`` and
every step of ``.ci/tpu-check`` parses. A harness line's overrides are checked by name
(``check_overrides``), then composed with Hydra job by job (a sweep expanded as Hydra's basic
sweeper does, ``hydra.*`` overrides and the launcher included) and built into the schema
(``to_config``); any other module's arguments go through its own argparse parser, stopped before
it does any work. A stale key fails here."""

from __future__ import annotations

import argparse
import importlib.util
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import open_dict

from evalharness.admission import checkpoint_optional
from evalharness.config import check_overrides, register_configs, to_config
from tests.helpers.harness_config import CONF_DIR
from tests.helpers.paths import REPO_ROOT

RUNBOOKS = sorted((REPO_ROOT / "docs").glob("runbook-*.md"))
_FENCE = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.DOTALL)
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ">", ">>", "<", "2>", "2>&1"}
_PYTHON = re.compile(r"(^|/)python(3(\.\d+)?)?$")
# This project's packages; ``python -m venv`` or ``pip`` lines are the system's, not checked here.
OURS = ("evalharness", "reports", "models", "kernels")


def python_commands(markdown: str) -> list[tuple[str, list[str]]]:
    """``(module, arguments)`` of every ``python -m module ...`` of this project in the text's
    shell blocks (continuation lines joined, comments and what follows a shell operator left
    out)."""
    found = []
    for block in _FENCE.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for at, word in enumerate(words[:-2]):
                if _PYTHON.search(word) and words[at + 1] == "-m":
                    args = []
                    for arg in words[at + 3 :]:
                        if arg in _SHELL_OPERATORS:
                            break
                        args.append(arg)
                    if words[at + 2].split(".")[0] in OURS:
                        found.append((words[at + 2], args))
    return found


def _hydra_jobs(args: list[str]) -> list[list[str]]:
    """The overrides of each job a command line launches (one, or a sweep's every job)."""
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def check_harness_command(args: list[str]) -> int:
    """Checks a ``python -m evalharness`` line as the CLI would take it; returns its job count.

    Raises:
        AssertionError: an override names no setting; any Hydra or schema error as raised.
    """
    problem = check_overrides(args)
    assert problem is None, problem
    register_configs()
    jobs = _hydra_jobs(args)
    for job in jobs:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose("config", overrides=job, return_hydra_config=True)
        with open_dict(cfg):
            del cfg["hydra"]  # checked by composing; the schema is the harness's own
        to_config(checkpoint_optional(cfg))
    return len(jobs)


class _Parsed(BaseException):
    """Raised right after a module's parser accepted its arguments: nothing else runs. A
    BaseException, so a command's last-resort ``except Exception`` (its exit 4) lets it through."""


def _then_stop(method: str):
    """``method`` of ArgumentParser that parses as it does, then stops the program."""
    original = getattr(argparse.ArgumentParser, method)

    def parse_then_stop(self, argv=None, namespace=None):
        original(self, argv, namespace)
        raise _Parsed

    return parse_then_stop


def check_module_command(module: str, args: list[str], monkeypatch) -> None:
    """Runs ``python -m module args`` up to its argument parsing, which must accept them (with
    ``parse_args``, or ``parse_intermixed_args`` where options and overrides interleave)."""
    assert importlib.util.find_spec(module) is not None, f"no module {module}"
    for method in ("parse_args", "parse_intermixed_args"):
        monkeypatch.setattr(argparse.ArgumentParser, method, _then_stop(method))
    monkeypatch.setattr(sys, "argv", [module, *args])
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _Parsed:
        return
    except SystemExit as refused:
        pytest.fail(f"python -m {module} {shlex.join(args)}: its parser refused (exit {refused})")
    pytest.fail(f"python -m {module} {shlex.join(args)}: no argparse parser ran")


def test_there_are_runbooks_and_they_are_linked():
    names = {p.name for p in RUNBOOKS}
    assert {"runbook-tpu-v6e.md", "runbook-h200.md", "runbook-slurm.md"} <= names
    readme = (REPO_ROOT / "README.md").read_text()
    for name in names:
        assert f"docs/{name}" in readme, name


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.stem)
def test_every_python_command_in_a_runbook_parses(runbook: Path, monkeypatch):
    commands = python_commands(runbook.read_text())
    assert any(module == "evalharness" for module, _ in commands), runbook.name
    for module, args in commands:
        where = f"{runbook.name}: python -m {module} {shlex.join(args)}"
        if module == "evalharness":
            try:
                assert check_harness_command(args) >= 1
            except Exception as err:  # noqa: BLE001 - name the line, whatever Hydra raised
                pytest.fail(f"{where}\n{type(err).__name__}: {err}")
        else:
            with monkeypatch.context() as patch:
                check_module_command(module, args, patch)


def test_the_seed_sweep_line_launches_three_jobs():
    text = (REPO_ROOT / "docs" / "runbook-tpu-v6e.md").read_text()
    sweeps = [a for m, a in python_commands(text) if m == "evalharness" and "-m" in a]
    assert sweeps and all(check_harness_command(a) == 3 for a in sweeps)


@pytest.mark.parametrize(
    "line",
    [
        "python -m evalharness modle.checkpoint=x",  # misspelt key
        "python -m evalharness -m experiment=seed_720p,seed_2160p",  # no such experiment
        "python -m evalharness dtype=float16",  # a value the schema refuses
        "python -m evalharness -m hydra/launcher=submitit_slurm hydra.launcher.partitio=gpu",
    ],
)
def test_a_stale_line_fails_the_check(line):
    ((module, args),) = python_commands(f"```bash\n{line}\n```\n")
    assert module == "evalharness"
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do: the line is stale
        check_harness_command(args)


def test_other_modules_parsers_refuse_unknown_flags(monkeypatch):
    with pytest.raises(pytest.fail.Exception, match="its parser refused"):
        check_module_command("reports", ["--experiment", "x", "--no-such-flag"], monkeypatch)


def tpu_check_commands(script: str) -> list[tuple[str, list[str]]]:
    """``(module, arguments)`` of each ``step NAME "$PY" -m module ...`` of ``.ci/tpu-check``
    that runs this project's code, with the script's ``WAN=`` words and ``$OUT`` filled in."""
    wan = re.search(r'^WAN="(.*)"$', script, re.MULTILINE)
    assert wan is not None, "tpu-check defines WAN"
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        if not line.startswith("step "):
            continue
        line = line.replace("$WAN", wan.group(1)).replace("$OUT", "out")
        words = shlex.split(line)
        assert words[2:4] == ["$PY", "-m"], line
        if words[4].split(".")[0] in OURS:
            found.append((words[4], words[5:]))
    return found


def test_every_python_command_of_the_tpu_check_parses(monkeypatch):
    """The device check runs on scarce chip time: a stale override or flag fails here, not there."""
    commands = tpu_check_commands((REPO_ROOT / ".ci" / "tpu-check").read_text())
    modules = [module for module, _ in commands]
    assert modules.count("evalharness") == 3  # the default job and the two 1.3B jobs
    assert {
        "evalharness.bench",
        "evalharness.bench.step_parts",
        "evalharness.bench.schedules",
    } <= set(modules)
    for module, args in commands:
        if module == "evalharness":
            assert check_harness_command(args) == 1, args
        else:
            with monkeypatch.context() as patch:
                check_module_command(module, args, patch)
