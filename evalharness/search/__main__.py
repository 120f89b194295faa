"""``python -m evalharness.search``: the schedule search, configured by Hydra like a run.

Every override of ``python -m evalharness`` works here (the trials' runs take them), plus the
``search.*`` section (``evalharness/search/settings.py``, ``docs/search.md``). Exit codes
(``evalharness.exit_codes``): 0 a trial met every threshold (its schedule file is written); 1 no
trial did (the message says the best value each threshold reached); 2 refused before any trial
(a bad setting, a search over ``max_minutes``, a taken study name), or a trial was refused; 3 a
dry run whose plan exceeds ``max_minutes``; 4 a trial failed while running (the others ran);
130 / 143 Ctrl-C / SIGTERM (the study keeps its finished trials: ``search.resume=true``).
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from evalharness import exit_codes
from evalharness.config import check_overrides, register_configs
from evalharness.refusal import CONFIG_ERRORS, PreflightRefusal
from evalharness.search.settings import (
    register_search_configs,
    search_value_problem,
    unknown_search_key,
)
from evalharness.search.study_run import dry_run_search, run_search
from evalharness.search.summary import answer_lines
from evalharness.tracking import redact_logs

log = logging.getLogger("evalharness.search")
redact_logs()  # Hydra logs the overrides, logger.tracking_uri's password among them
register_configs()
register_search_configs()


# (code, message): exited with after Hydra returns (Hydra's own failure to compose a config
# exits 1 from inside it, which :func:`cli` turns into 2).
_endings: list[tuple[int, str]] = []


@hydra.main(version_base="1.3", config_path="../conf", config_name="search")
def main(cfg: DictConfig) -> None:
    """Plans (``dry_run=true``) or runs the search; every ending becomes its exit code."""
    try:
        if cfg.dry_run:
            code, report = dry_run_search(cfg)
            print(report, flush=True)
            if code:
                message = "the search's estimated time exceeds max_minutes (see the plan)"
                _endings.append((code, message))
            return
        result = run_search(cfg)
    except PreflightRefusal as refusal:
        _endings.append((exit_codes.REFUSED, str(refusal)))
    except CONFIG_ERRORS as err:
        _endings.append((exit_codes.REFUSED, f"{err} (nothing was run)"))
    except Exception:  # noqa: BLE001 - a bug: keep its traceback, and still one meaning for 4
        log.exception("the search failed")
        message = "the search failed (traceback above; the study keeps its trials)"
        _endings.append((exit_codes.FAILED, message))
    else:
        print("\n".join(answer_lines(result.answer, result.psnr_label, result.schedule_name)))
        print(result.message, flush=True)
        if result.code != exit_codes.OK:
            _endings.append((result.code, result.message))


def check_search_overrides(args: list[str]) -> str | None:
    """The first override whose name is neither a run's setting nor a ``search.*`` one."""
    run_args = []
    for arg in args:
        key = arg.split("=", 1)[0]
        if key.startswith("search.") and "=" in arg:
            problem = unknown_search_key(key) or search_value_problem(arg)
            if problem:
                return f"{problem} (in {arg!r}; nothing was run)"
            continue
        run_args.append(arg)
    return check_overrides(run_args)


def cli(argv: list[str] | None = None) -> None:
    """Entry point: checks the overrides' names, runs, and turns every ending into its code."""
    args = sys.argv[1:] if argv is None else argv
    if "-m" in args or "--multirun" in args:
        print("error: a search is one process that runs its trials; drop -m", file=sys.stderr)
        sys.exit(exit_codes.REFUSED)
    problem = check_search_overrides(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(exit_codes.REFUSED)
    exit_codes.run_hydra_entry(
        main,
        "the search's study keeps its finished trials: rerun with search.resume=true (and the "
        "same search.study_name) to continue",
    )
    for code, message in _endings:
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(code)


if __name__ == "__main__":
    cli()
