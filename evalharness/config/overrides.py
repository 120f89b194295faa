"""Command-line overrides checked by name before Hydra composes them, with a "did you mean".

Hydra refuses ``warm_run=1`` (a misspelt ``warm_runs``) by suggesting ``+warm_run=1``, which only
fails later as an unknown key. :func:`check_overrides` knows every settable path from the
schemas (``EvalConfig`` and the dataclasses inside it) and the config groups under ``conf/``,
and names the closest one. Hydra's own flags (``-m``, ``--cfg``), ``hydra.*`` settings, appends
(``+key``), deletions (``~key``) and package overrides (``group@pkg``) are left to Hydra, except
``hydra/launcher=submitit_*``, refused with the extra to install when its plugin is not installed.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from evalharness.config.compose import CONF_DIR
from evalharness.config.schemas import EvalConfig, schema

# Hydra's launchers that the ``launchers`` extra's plugin (hydra-submitit-launcher) brings.
SUBMITIT_LAUNCHERS = ("submitit_local", "submitit_slurm")
SUBMITIT_PLUGIN = "hydra_plugins.hydra_submitit_launcher"
# Hydra's command-line flags whose value is the next word (``--cfg job``, ``-cn config``).
VALUE_FLAGS = frozenset(
    ("-c", "--cfg", "-p", "--package", "-i", "--info", "-cp", "--config-path", "-cn")
    + ("--config-name", "-cd", "--config-dir", "--experimental-rerun")
)
# An override key Hydra's grammar reads (its prefix + or ~ aside).
_READABLE_KEY = re.compile(r"[+~]{0,2}[A-Za-z0-9_\-./@$]+")


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds (through ``X | None``), else None."""
    for candidate in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _is_mapping(hint: Any) -> bool:
    return typing.get_origin(hint) is dict or hint is dict


def _groups() -> set[str]:
    """Config groups under ``conf/`` (``model``, ``experiment``, ...)."""
    return {p.name for p in CONF_DIR.iterdir() if p.is_dir()} if CONF_DIR.is_dir() else set()


def _lookup(path: str) -> tuple[str | None, tuple[type, str] | None]:
    """The problem with a dotted settings path (None when it names a setting), and the
    dataclass and field it sets when that is a typed leaf (not a group, a sub-config or a
    free-form mapping), else None."""
    parts = path.split(".")
    node: type = EvalConfig
    groups = _groups()
    for depth, part in enumerate(parts):
        fields = typing.get_type_hints(node)
        known = set(fields) | (groups if depth == 0 else set())
        if part not in known:
            prefix = ".".join(parts[:depth])
            close = difflib.get_close_matches(part, sorted(known), n=1, cutoff=0.6)
            where = f"{prefix}." if prefix else ""
            hint = f"; did you mean {where}{close[0]}?" if close else ""
            choices = "" if close else f"; the settings here are {', '.join(sorted(known))}"
            return f"unknown setting {path!r}{hint}{choices}", None
        # A group with no schema field (experiment: Hydra checks its value), or free-form keys
        # (logger.tags.*).
        if part not in fields or _is_mapping(fields[part]):
            return None, None
        child = _dataclass_of(fields[part])
        if child is None and depth + 1 < len(parts):
            owner = ".".join(parts[: depth + 1])
            return f"unknown setting {path!r}: {owner} has no fields", None
        if child is None:
            return None, (node, part)
        node = child
    return None, None


def unknown_key(path: str) -> str | None:
    """The problem with a dotted settings path, or None when it names a setting."""
    return _lookup(path)[0]


def check_overrides(args: list[str]) -> str | None:
    """The first override whose name is not a setting, with the closest one; None if all are.

    Args:
        args: the command line after the program (``sys.argv[1:]``).
    """
    search = search_path(args)
    for arg in overrides_of(args):
        unreadable = grammar_problem(arg)
        if unreadable:
            return f"{unreadable} (nothing was run)"
        if arg.startswith(("+", "~")) or "=" not in arg:
            continue
        key = arg.split("=", 1)[0]
        if key == "hydra/launcher" and (problem := launcher_problem(arg)):
            return f"{problem} (nothing was run)"
        if key.startswith("hydra") or "/" in key or "@" in key:
            continue
        grouped = None if search is None else group_option_problem(arg, search)
        problem = unknown_key(key) or grouped or value_problem(arg)
        if problem:
            return f"{problem} (in {arg!r}; nothing was run)"
    return None


def overrides_of(args: Sequence[str]) -> list[str]:
    """The words of a command line that Hydra reads as overrides: all but its flags and the
    values of the flags that take one (``--cfg job``)."""
    found = []
    for before, word in zip(["", *args], args, strict=False):
        # A flag's value has no "=" (``--info`` may come without one, before an override).
        is_value = before in VALUE_FLAGS and "=" not in word and not word.startswith("~")
        if not word.startswith("-") and not is_value:
            found.append(word)
    return found


def grammar_problem(arg: str) -> str | None:
    """Why Hydra's override grammar cannot read ``arg`` (a key with a character outside its
    ASCII letters, digits, ``_ - . / @``, a word without ``=``, an empty key), with the form it
    reads; None when it reads."""
    key = arg.split("=", 1)[0]
    if "=" in arg and not key.lstrip("+~"):
        return f"the override {arg!r} has an empty key: write KEY=VALUE, e.g. steps=2"
    try:
        OverridesParser.create().parse_override(arg)
    except HydraException as err:
        reason = str(err).strip().splitlines()[0]
        if "=" in arg and not _READABLE_KEY.fullmatch(key):
            return (
                f"the override key {key!r} cannot be read by Hydra's override grammar "
                f"({reason}): a key is ASCII letters, digits and _ - . / @ (in {arg!r})"
            )
        if "=" not in arg:
            return (
                f"{arg!r} is not an override: Hydra reads KEY=VALUE (e.g. steps=2), +KEY=VALUE "
                f"to add a key or ~KEY to delete one ({reason})"
            )
    return None


def launcher_problem(arg: str) -> str | None:
    """For ``hydra/launcher=submitit_local`` or ``submitit_slurm`` without its plugin installed:
    what is missing and the extra that installs it; None otherwise (Hydra names an unknown one)."""
    launcher = arg.partition("=")[2].strip()
    if launcher not in SUBMITIT_LAUNCHERS:
        return None
    try:
        installed = importlib.util.find_spec(SUBMITIT_PLUGIN) is not None
    except ModuleNotFoundError:  # no hydra_plugins namespace at all
        installed = False
    if installed:
        return None
    return (
        f"hydra/launcher={launcher} needs Hydra's submitit launcher plugin, which is not "
        "installed: pip install -e '.[launchers]' brings it"
    )


def group_options(group: str, search_path: Sequence[Path] = ()) -> list[str]:
    """The options of a config group: its YAML files under ``conf/<group>/`` and under each
    extra search-path folder's ``<group>/``, sorted."""
    folders = [CONF_DIR / group, *(Path(root) / group for root in search_path)]
    return sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.yaml")})


def search_path(args: Sequence[str]) -> list[Path] | None:
    """The folders a ``hydra.searchpath=[file://...]`` override adds; None when it names a
    search path this check cannot read (``pkg://``), so Hydra alone decides the options."""
    folders: list[Path] = []
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") != "hydra.searchpath":
            continue
        entries = [e.strip(" '\"") for e in value.strip("[]").split(",") if e.strip()]
        if any(not e.startswith("file://") for e in entries):
            return None
        folders += [Path(e.removeprefix("file://")) for e in entries]
    return folders


def group_option_problem(arg: str, search: Sequence[Path] = ()) -> str | None:
    """For ``group=option`` (``schedule=balanced``, or a sweep ``a,b``): the option that is not
    a file of that group (in ``conf/`` or the ``search`` folders), with the closest one and
    every choice; None otherwise."""
    key, _, value = arg.partition("=")
    if key not in _groups() or not value or any(c in value for c in "()[]{}'\"\\$"):
        return None  # not a group, or a sweep function or interpolation: Hydra reads those
    options = group_options(key, search)
    for option in (v.strip() for v in value.split(",")):
        if option in options or option == "null":
            continue
        close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
        hint = f"; did you mean {key}={close[0]}?" if close else ""
        return f"no {key} named {option!r}{hint}; the choices are {', '.join(options)}"
    return None


def value_problem(arg: str) -> str | None:
    """What Hydra would refuse in a ``key=value`` override's value, with the key named: a value
    its override grammar cannot read (an unquoted ``<``), or one of the wrong type for the
    setting (``gate.min_speedup=abc``); None when it reads and fits, or is not a typed leaf."""
    key = arg.split("=", 1)[0]
    try:
        override = OverridesParser.create().parse_override(arg)
    except HydraException as err:
        reason = str(err).strip().splitlines()[0]
        return (
            f"the value of {key} cannot be read by Hydra's override grammar ({reason}); quote "
            f"it: '{key}=\"...\"' (single quotes around it all for the shell)"
        )
    leaf = _lookup(key)[1]
    if leaf is None or override.is_sweep_override():
        return None
    node = schema(leaf[0])
    try:
        node[leaf[1]] = override.value()
    except OmegaConfBaseException as err:
        reason = str(err).strip().splitlines()[0]
        return f"{key}={override.value()!r} is not a valid value for {key}: {reason}"
    return None


def multirun_first(args: list[str]) -> list[str]:
    """``args`` with ``-m``/``--multirun`` moved to the front, the rest in order (Hydra's parser
    reads the overrides as one run of words, so an override before ``-m`` would split them)."""
    flags = ("-m", "--multirun")
    return [*(a for a in args if a in flags), *(a for a in args if a not in flags)]
