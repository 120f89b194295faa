"""VBench's standard prompts as a prompt suite (``prompts=vbench``): the 946 entries of
``vbench/VBench_full_info.json`` (each a prompt and the VBench dimensions it is scored on), read
from the installed ``vbench`` distribution's own file, the suite Sparse VideoGen's text-to-video
prompts are rewritten from.

The file is read as JSON, never by importing ``vbench`` (whose requirements, numpy<2 and
transformers 4.33 among them, conflict with this project's and are not needed to read it), so it
is installed without them: ``pip install --no-deps vbench==0.1.5``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SUITE = "vbench"
DISTRIBUTION = "vbench"
VERSION = "0.1.5"
INSTALL = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"
PROMPT_FILE = "VBench_full_info.json"


class VBenchMissing(ValueError):
    """The ``vbench`` distribution, which holds the prompt file, is not installed."""


def prompt_file() -> Path:
    """``VBench_full_info.json`` inside the installed ``vbench`` package (found, not imported).

    Raises:
        VBenchMissing: the distribution or its file is not installed, naming the install command.
    """
    spec = importlib.util.find_spec(DISTRIBUTION)
    locations = [] if spec is None else list(spec.submodule_search_locations or [])
    path = Path(locations[0]) / PROMPT_FILE if locations else None
    if path is None or not path.is_file():
        raise VBenchMissing(
            f"prompts={SUITE} reads VBench's prompts from the {DISTRIBUTION} distribution "
            f"({PROMPT_FILE}), which is not installed: {INSTALL} (the optional vbench "
            "install; its own requirements are not needed to read the prompts)"
        )
    return path


def vbench_entries(path: str | Path | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """Every entry of the prompt file in its order: (prompt, its VBench dimensions)."""
    data = json.loads(Path(path or prompt_file()).read_text(encoding="utf-8"))
    return [(str(e["prompt_en"]), tuple(e["dimension"])) for e in data]


def vbench_prompts(
    dimension: str | None = None, limit: int | None = None, path: str | Path | None = None
) -> list[str]:
    """VBench's prompts, in the file's order, each once (a prompt listed under two dimensions is
    one prompt), optionally of one dimension and a fixed sample of ``limit`` of them.

    Args:
        dimension: a VBench dimension (``color``, ``human_action``, ...); None: all.
        limit: at most this many prompts, spread evenly over the list (the first, the last and
            evenly spaced ones between, so a sample covers every dimension in file order, and the
            same every time); None: all.
        path: the prompt file; default: the installed distribution's.

    Raises:
        VBenchMissing: the distribution is not installed.
        ValueError: an unknown dimension (the known ones listed) or a limit below 1.
    """
    entries = vbench_entries(path)
    if dimension is not None:
        known = sorted({d for _, dims in entries for d in dims})
        if dimension not in known:
            raise ValueError(
                f"prompts.dimension={dimension!r} is not a VBench dimension; the dimensions are "
                f"{', '.join(known)}"
            )
        entries = [e for e in entries if dimension in e[1]]
    prompts = list(dict.fromkeys(text for text, _ in entries))
    return sample(prompts, limit)


def sample(prompts: Sequence[str], limit: int | None) -> list[str]:
    """A fixed, evenly spread sample of at most ``limit`` prompts, in their order (all of them
    when ``limit`` is None or not below their number).

    Raises:
        ValueError: a limit below 1.
    """
    if limit is None or limit >= len(prompts):
        return list(prompts)
    if limit < 1:
        raise ValueError(f"prompts.limit={limit} must be >= 1, or null for every prompt")
    picks = np.unique(np.round(np.linspace(0, len(prompts) - 1, limit)).astype(int))
    return [prompts[i] for i in picks]
