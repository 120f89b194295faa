"""The low end of the search's density range against the run's geometry."""

from __future__ import annotations

from evalharness.assembly import platform_choices
from evalharness.config import EvalConfig, token_geometry
from evalharness.search.settings import SearchConfig
from kernels.plans.block_sizes import BlockSizes
from kernels.policy.schedule import SparsitySchedule


def check_density_floor(search: SearchConfig, base: EvalConfig) -> None:
    """Refuses a density range whose low end this run's geometry cannot run: a band narrower
    than one tile is refused by every trial that draws it (each would end the search with code 2
    for a point the search itself chose).

    Raises:
        ValueError: ``search.density.low`` too small; the message names the smallest grid value
            the geometry and tiles allow, or says that none does.
    """
    resolved = platform_choices.resolve(base)
    video = base.resolution.video
    geometry = token_geometry(video)
    tiles = BlockSizes(resolved.kernel.block_q, resolved.kernel.block_kv)
    knob = search.density
    steps = round((knob.high - knob.low) / knob.step) if knob.step else 0
    first_error = None
    for i in range(steps + 1):
        density = round(knob.low + i * knob.step, 6)
        try:
            probe = SparsitySchedule("density-floor", first_times_fp=0.0, density=density)
            probe.validate(geometry, tiles)
        except ValueError as err:
            first_error = first_error or err
            continue
        if first_error is not None:
            raise ValueError(
                f"search.density.low={knob.low:g}: {first_error}. The smallest density on the "
                f"search's grid this run allows is {density:g}: set search.density.low={density:g}"
            )
        return
    raise ValueError(
        f"search.density={knob.low:g}..{knob.high:g}: no value on its grid can run here "
        f"({first_error}); raise search.density.high or use smaller kernel tiles"
    )
