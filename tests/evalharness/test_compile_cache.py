"""JAX's persistent compilation cache: a second process takes a program from it, counted by
JAX's events; off, nothing is taken and no folder is made.

JAX's cache settings are global to a process, so every case that compiles runs in a fresh
Python process, as a second job would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalharness import compile_cache
from evalharness.compile_cache import CompileCacheSummary
from tests.helpers.paths import REPO_ROOT

# One process: the cache enabled under argv[1] (on unless argv[2] == "off"), one jitted program
# compiled and run, the summary printed as JSON; then, given argv[3], the cache moved under it
# and another program compiled.
_PROCESS = """
import json, sys
import jax, jax.numpy as jnp
from evalharness import compile_cache
compile_cache.enable(sys.argv[1], on=sys.argv[2] == "on")
jax.jit(lambda x: jnp.sin(x) * 2.0 + x.sum())(jnp.arange(8.0)).block_until_ready()
done = compile_cache.summary()
print(json.dumps({**done.__dict__, "compiled": done.compiled, "metrics": done.as_metrics()}))
if len(sys.argv) > 3:
    compile_cache.enable(sys.argv[3])
    jax.jit(lambda x: jnp.cos(x) - 1.0)(jnp.arange(4.0)).block_until_ready()
"""


def _process(
    cache_dir: Path, on: str = "on", env_folder: Path | None = None, then: Path | None = None
) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop(compile_cache.ENV_FOLDER, None)  # the session's own cache (tests/conftest.py)
    if env_folder is not None:
        env[compile_cache.ENV_FOLDER] = str(env_folder)
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS, str(cache_dir), on, *([str(then)] if then else [])],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_takes_its_programs_from_the_cache_and_off_takes_none(tmp_path):
    folder = tmp_path / "cache" / compile_cache.FOLDER
    first = _process(tmp_path / "cache")
    assert first["folder"] == str(folder)
    assert first["programs"] >= 1 and first["from_cache"] == 0
    assert first["written"] == first["compiled"] == first["programs"]  # every program is kept
    assert any(folder.iterdir())

    second = _process(tmp_path / "cache", then=tmp_path / "moved")
    assert second["programs"] == first["programs"]
    assert second["from_cache"] == second["programs"] and second["compiled"] == 0
    assert second["written"] == 0
    assert second["metrics"] == {
        "compile_cache_hits": second["programs"],
        "compile_cache_misses": 0,
    }
    # Enabled again under another cache_dir after compiling: the next program is written there.
    assert any((tmp_path / "moved" / compile_cache.FOLDER).iterdir())

    # Off: nothing is taken, even from the folder the environment names, and no folder is made.
    off = _process(tmp_path / "off", "off", env_folder=folder)
    assert off["folder"] is None and off["from_cache"] == 0 and off["written"] == 0
    assert off["compiled"] == off["programs"] >= 1
    assert not (tmp_path / "off").exists()


def test_the_folder_is_under_cache_dir_unless_the_environment_names_one(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV_FOLDER, raising=False)
    assert compile_cache.cache_folder(tmp_path) == tmp_path / "jax_compile"
    monkeypatch.chdir(tmp_path)
    assert compile_cache.cache_folder("rel") == tmp_path / "rel" / "jax_compile"  # absolute
    monkeypatch.setenv(compile_cache.ENV_FOLDER, str(tmp_path / "shared"))
    assert compile_cache.cache_folder("elsewhere") == tmp_path / "shared"


@pytest.mark.parametrize(
    ("done", "line", "metrics"),
    [
        (
            CompileCacheSummary("/c/jax_compile", programs=9, from_cache=7, written=1),
            "compilation cache: 7 of 9 programs taken from /c/jax_compile (2 compiled, 1 written)",
            {"compile_cache_hits": 7, "compile_cache_misses": 2},
        ),
        (
            CompileCacheSummary(None, programs=9, from_cache=0, written=0),
            "compilation cache: off; 9 programs compiled",
            {"compile_cache_hits": 0, "compile_cache_misses": 9},
        ),
    ],
)
def test_the_summary_says_what_was_taken_and_what_was_compiled(done, line, metrics):
    assert done.line() == line
    assert done.as_metrics() == metrics
