"""Prompt suites and seeds: which (prompt, seed) pairs a run compares.

A run compares every pair of ``prompts`` (a built-in suite's name or a text file) × ``seeds``, or
the one pair ``(prompt, seed)`` when neither is set. Their metrics are summarized across pairs by
``evalharness.evidence.statistics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalharness.config.vbench_suite import SUITE as VBENCH
from evalharness.config.vbench_suite import sample, vbench_prompts

# The default model's language: moving shapes (``models.shapes_data``), every prompt a held-out
# combination the trained ``tiny`` never saw whole; each suite mixes shapes, colours, speeds,
# straight and diagonal motion and backgrounds. ``scenes`` speaks to a real Wan checkpoint: motion,
# a camera move, a static scene, rendered text, fine texture and a crowd, what makes spatial and
# temporal heads work differently.
_SMOKE = (
    "a red circle moves quickly up on a dark blue background",
    "a yellow circle moves quickly down on a black background",
    "a magenta square moves quickly to the right on a dark grey background",
)
BUILT_IN_SUITES: dict[str, tuple[str, ...]] = {
    "smoke": _SMOKE,
    "varied": (
        *_SMOKE,
        "a white triangle moves slowly diagonally down and to the left on a black background",
        "a cyan square moves slowly diagonally up and to the right on a purple to black "
        "gradient background",
        "a red square moves quickly up on a purple to black gradient background",
    ),
    "scenes": (
        "A red fox trotting through fresh snow in a pine forest at sunrise",
        "A slow camera pan across a harbour at dusk, boats rocking, city lights coming on",
        "A still life of apples and a ceramic jug on a wooden table, soft window light",
        'A neon sign that reads "OPEN 24 HOURS" flickering above a rainy street at night',
        "Close-up of ocean waves breaking over dark volcanic rocks, spray in the wind",
        "A busy crosswalk seen from above, hundreds of people crossing in every direction",
    ),
}


@dataclass(frozen=True)
class Pair:
    """One (prompt, seed) pair of a run.

    Attributes:
        index: position in the run, from 0.
        prompt: the prompt.
        prompt_index: the prompt's position in the suite (pairs sharing it share embeddings).
        seed: the noise seed.
    """

    index: int
    prompt: str
    prompt_index: int
    seed: int

    @property
    def name(self) -> str:
        """A folder- and run-name-safe label, e.g. ``p1-s42``."""
        return f"p{self.prompt_index}-s{self.seed}"


# ``prompts.dimension=`` / ``prompts.limit=`` on the command line set ``prompt_filter.*``.
_ALIASES = {"prompts.dimension": "prompt_filter.dimension", "prompts.limit": "prompt_filter.limit"}


def prompt_aliases(args: Sequence[str]) -> list[str]:
    """Command-line overrides with ``prompts.dimension=`` and ``prompts.limit=`` spelt as the
    settings they set (``prompt_filter.dimension``, ``prompt_filter.limit``); the rest as given."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        out.append(f"{_ALIASES[key]}={value}" if sep and key in _ALIASES else arg)
    return out


def load_prompts(spec: str, dimension: str | None = None, limit: int | None = None) -> list[str]:
    """The prompts of a built-in suite (by name; ``vbench``: VBench's standard prompts) or of a
    text file (one prompt per line; blank lines and lines starting with ``#`` are skipped).

    Args:
        spec: the suite's name or the file.
        dimension: with ``vbench``, only the prompts of this VBench dimension.
        limit: at most this many, a fixed sample spread evenly over the suite.

    Raises:
        ValueError: neither a built-in suite nor an existing file, a file without prompts, a
            dimension for another suite than ``vbench``, or ``vbench`` not installed.
    """
    if spec == VBENCH:
        return vbench_prompts(dimension, limit)
    if dimension is not None:
        raise ValueError(
            f"prompts.dimension={dimension!r} selects VBench prompts: it needs prompts={VBENCH}, "
            f"not prompts={spec!r}"
        )
    if spec in BUILT_IN_SUITES:
        return sample(BUILT_IN_SUITES[spec], limit)
    path = Path(spec).expanduser()
    if not path.is_file():
        suites = ", ".join(sorted([*BUILT_IN_SUITES, VBENCH]))
        raise ValueError(
            f"prompts={spec!r} is neither a built-in suite ({suites}) nor an existing file; give "
            "a suite name or the path of a text file with one prompt per line"
        )
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if not prompts:
        raise ValueError(f"prompts={spec!r}: the file holds no prompt (one per line, # comments)")
    return sample(prompts, limit)


def config_pairs(cfg: Any) -> list[Pair]:
    """Every (prompt, seed) pair of a run's config (``EvalConfig``), its prompt filter applied."""
    chosen = cfg.prompt_filter
    return run_pairs(
        cfg.prompt, cfg.seed, cfg.prompts, cfg.seeds, dimension=chosen.dimension, limit=chosen.limit
    )


def run_pairs(
    prompt: str,
    seed: int,
    prompts: str | None = None,
    seeds: Sequence[int] | None = None,
    *,
    dimension: str | None = None,
    limit: int | None = None,
) -> list[Pair]:
    """Every (prompt, seed) pair of a run, prompt-major.

    Args:
        prompt: the single prompt, used when ``prompts`` is None.
        seed: the single seed, used when ``seeds`` is None.
        prompts: a built-in suite's name or a prompt file (see :func:`load_prompts`).
        seeds: noise seeds (distinct ints).
        dimension: with ``prompts=vbench``, one VBench dimension's prompts.
        limit: at most this many prompts of the suite (a fixed, evenly spread sample).

    Raises:
        ValueError: an unknown suite or missing file, an empty or repeated seed list, a non-int
            seed, or repeated prompts.
    """
    if prompts is None and (dimension is not None or limit is not None):
        raise ValueError(
            "prompts.dimension and prompts.limit choose prompts of a suite: give prompts=<suite "
            "or file> too (e.g. prompts=vbench)"
        )
    texts = [prompt] if prompts is None else load_prompts(prompts, dimension, limit)
    repeated = sorted({p for p in texts if texts.count(p) > 1})
    if repeated:
        raise ValueError(f"prompts={prompts!r} repeats {repeated}: each prompt once")
    seed_list = [seed] if seeds is None else list(seeds)
    if not seed_list:
        raise ValueError("seeds=[]: give at least one seed, e.g. seeds=[0,1], or leave it unset")
    for value in seed_list:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"seeds={list(seeds)}: {value!r} is not an int")
    if len(set(seed_list)) != len(seed_list):
        raise ValueError(f"seeds={seed_list} repeats a seed: a repeated pair adds no information")
    combos = [(i, text, value) for i, text in enumerate(texts) for value in seed_list]
    return [Pair(n, text, i, int(value)) for n, (i, text, value) in enumerate(combos)]
