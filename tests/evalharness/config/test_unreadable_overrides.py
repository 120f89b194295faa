"""An override Hydra's grammar cannot read (a key outside its ASCII letters, a word without
``=``, an empty key) is refused by both commands with exit 2 and one ``error:`` line naming it,
before Hydra prints its lexer's error."""

from __future__ import annotations

import pytest

from evalharness import __main__ as run_main
from evalharness.config import check_overrides
from evalharness.search import __main__ as search_main

UNREADABLE = [
    ("+logger.tags.ünï=v", "cannot be read by Hydra's override grammar"),
    ("a%b=v", "cannot be read by Hydra's override grammar"),
    ("a%b", "is not an override"),
    ("=v", "has an empty key"),
    ("+=v", "has an empty key"),
]


@pytest.mark.parametrize(("arg", "why"), UNREADABLE)
@pytest.mark.parametrize("command", [run_main, search_main], ids=["evalharness", "search"])
def test_an_unreadable_override_is_one_error_line_and_exit_2(capsys, command, arg, why):
    with pytest.raises(SystemExit) as ended:
        command.cli(["logger=none", arg])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and why in err and "nothing was run" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--cfg", "job", "steps=2"],
        ["--info", "steps=2"],
        ["-cn", "config", "~noise_floor"],
        ['prompt="a%b"', "+logger.tags.team-1=v"],
    ],
)
def test_flags_their_values_and_quoted_values_pass(args):
    assert check_overrides(args) is None
