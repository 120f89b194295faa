"""The benchmarks' command line on the run's configuration: ``--json`` and the run's Hydra
overrides as positional arguments, composed and resolved for this host as ``python -m
evalharness`` does, so a benchmark has no defaults of its own."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from evalharness.assembly import platform_choices
from evalharness.config import EvalConfig, check_overrides, compose_run_config, to_config


def config_or_exit(
    parser: argparse.ArgumentParser, overrides: Sequence[str], *, resolve: bool = True
) -> EvalConfig:
    """The run's config from a command line's overrides, or exit 2 through ``parser`` with what
    the run itself would say: an unknown setting and the closest one, a group choice that does
    not exist, a value the schema or this platform refuses. ``resolve=False`` leaves it
    unresolved (resolving starts JAX's backends).
    """
    problem = check_overrides(list(overrides))
    if problem:
        parser.error(problem)
    try:
        cfg = to_config(compose_run_config(overrides))
        return platform_choices.resolve(cfg) if resolve else cfg
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        parser.error(str(error))


def bench_parser(module: str, doc: str | None, example: str) -> argparse.ArgumentParser:
    """A benchmark's parser: ``python -m <module>``, ``doc`` (its docstring) as the help,
    ``--json`` and the run's overrides (``example`` shows one in the help); the benchmark adds
    its own options."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("overrides", nargs="*", help=f"the run's Hydra overrides, e.g. {example}")
    return parser
