"""The search's time plan, before any trial runs: how many trials, the estimated minutes of one,
the total against ``max_minutes`` (and against ``search.time_budget_minutes``).

A trial is a whole run, so its estimate is the run planner's (``evalharness.admission.admit``, the
plan a run writes to ``time_plan.md``) for the trial's config at the slowest corner of the bounds.
The first trial of a fresh study is that run as planned; every later trial, and every trial of a
resumed study, spends less by what ``evalharness.admission.reusable_seconds`` counts (the dense
loops' compiles, the dense videos' decoding, the prompt embeddings); every trial still times all
its arms afresh and measures every video. ``max_minutes`` bounds the whole search; each trial's
own preflight checks one run against it, and after each trial the rest is revised from what the
trials took (:meth:`SearchPlan.revised_minutes`): the search stops if that is over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig

from evalharness.admission import admit, reusable_seconds
from evalharness.assembly import platform_choices
from evalharness.config import to_config
from evalharness.estimates import TimeEstimate
from evalharness.refusal import PreflightRefusal
from evalharness.search.settings import SearchConfig
from evalharness.search.trials import trial_config
from kernels.policy.schedule import SPARSE_VARIANTS


@dataclass(frozen=True)
class SearchPlan:
    """The time plan.

    Attributes:
        trials: trials still to run (``search.trials`` less those the study holds).
        done: finished trials the study holds already (a resumed search).
        trial_minutes: the estimated minutes of a trial that reuses what an earlier one left
            (every trial after the first; every trial of a resumed study).
        max_minutes: the user's limit on the whole search.
        budget_minutes: ``search.time_budget_minutes`` (None: none).
        first_minutes: the estimated minutes of the first trial of a fresh study (compiles every
            loop, decodes the dense arms); None: the same as ``trial_minutes``.
    """

    trials: int
    done: int
    trial_minutes: float
    max_minutes: float
    budget_minutes: float | None
    first_minutes: float | None = None

    @property
    def cold_minutes(self) -> float:
        """Minutes of the first trial this invocation runs."""
        if self.done == 0 and self.first_minutes is not None:
            return self.first_minutes
        return self.trial_minutes

    def estimate_of(self, index: int) -> float:
        """The estimated minutes of this invocation's ``index``-th trial (0 first)."""
        return self.cold_minutes if index == 0 else self.trial_minutes

    @property
    def total_minutes(self) -> float:
        """The estimated minutes of the trials to run; with a time budget, no trial starts after
        it, so the budget plus one trial bounds it."""
        if self.trials == 0:
            return 0.0
        total = self.cold_minutes + (self.trials - 1) * self.trial_minutes
        if self.budget_minutes is not None:
            total = min(total, self.budget_minutes + self.cold_minutes)
        return total

    @property
    def within(self) -> bool:
        """Whether the estimate is within ``max_minutes``."""
        return self.total_minutes <= self.max_minutes

    def revised_minutes(self, measured: list[tuple[float, float]], left: int) -> float:
        """The minutes the ``left`` trials still to run will take, revised from this invocation's
        trials that measured something, as ``(took, estimated)`` minutes (a trial refused before
        any work says nothing of the pace): the estimate of a later trial scaled by how far the
        measured trials were from their estimates (the host's load, what the model misses)."""
        if left <= 0:
            return 0.0
        if not measured:
            return left * self.trial_minutes
        scale = sum(t for t, _ in measured) / sum(e for _, e in measured)
        return left * self.trial_minutes * scale

    def lines(self) -> list[str]:
        """The plan in a few lines, the verdict last."""
        budget = "none" if self.budget_minutes is None else f"{self.budget_minutes:g} min"
        if self.cold_minutes != self.trial_minutes:
            per_trial = (
                f"{self.cold_minutes:,.1f} min for the first (compiles every loop, decodes the "
                f"dense arms), {self.trial_minutes:,.1f} min for each later one (dense loops "
                "from JAX's compilation cache, dense videos from the dense-arm cache)"
            )
        else:
            per_trial = (
                f"{self.trial_minutes:,.1f} min (dense loops and videos from the caches an earlier "
                "trial filled)"
            )
        out = [
            f"- Trials: {self.trials} to run ({self.done} already in the study)",
            f"- Estimated time per trial: {per_trial}; the run planner's time plan at the slowest "
            "corner of the bounds",
            f"- Time budget (search.time_budget_minutes): {budget}",
        ]
        if self.within:
            out.append(
                f"- Time: within max_minutes: an estimated {self.total_minutes:,.1f} of "
                f"{self.max_minutes:g} minutes in all"
            )
        else:
            out.append(f"- Time: OVER max_minutes: {self.refusal()}")
        return out

    def refusal(self) -> str:
        """What is over, and the settings that would bring it within."""
        room = self.max_minutes - self.cold_minutes
        fits = 0 if room < 0 else 1 + math.floor(room / self.trial_minutes)
        need = math.ceil(self.total_minutes * 1.1)
        per_trial = f"{self.trial_minutes:,.1f} min each"
        if self.cold_minutes != self.trial_minutes:
            per_trial = (
                f"{self.cold_minutes:,.1f} min the first, {self.trial_minutes:,.1f} min the others"
            )
        return (
            f"an estimated {self.total_minutes:,.1f} minutes for {self.trials} trials "
            f"({per_trial}) exceeds max_minutes={self.max_minutes:g}; raise "
            f"max_minutes (e.g. max_minutes={need}), or run search.trials={self.done + fits} now "
            "and resume later (search.resume=true), or set search.time_budget_minutes"
        )


def slowest_knobs(search: SearchConfig) -> dict[str, object]:
    """The corner of the bounds whose trial takes longest."""
    # Slowest first, as the registry orders them: b1 treats every visited tile as partial, b2
    # runs full tiles mask-free, b3 also rounds partial tiles away.
    variants = sorted(search.variant, key=SPARSE_VARIANTS.index)
    return {
        "density": search.density.high,
        "first_times_fp": search.first_times_fp.high,
        "first_layers_fp": search.first_layers_fp.high,
        "routing_samples": max(search.routing_samples),
        "variant": variants[0],
    }


def trial_timing(run_cfg: DictConfig, search: SearchConfig) -> TimeEstimate:
    """The run planner's time plan of one trial at the slowest corner (nothing is allocated).

    Raises:
        PreflightRefusal: one such run would not fit (memory, time against ``max_minutes``).
    """
    cfg = trial_config(
        run_cfg, "slowest-corner", slowest_knobs(search), {}, routing_stats=search.routing_stats
    )
    resolved = platform_choices.resolve(to_config(cfg))
    return admit(resolved).sizing.timing


def trial_minutes(run_cfg: DictConfig, search: SearchConfig) -> tuple[float, float]:
    """``(first, later)``: the estimated minutes of a fresh study's first trial and of every
    later one, at the slowest corner."""
    timing = trial_timing(run_cfg, search)
    cold = timing.total_minutes
    return cold, cold - reusable_seconds(timing) / 60.0


def make_plan(
    run_cfg: DictConfig, search: SearchConfig, done: int, max_minutes: float
) -> SearchPlan:
    """The plan of a search whose study holds ``done`` finished trials."""
    first, later = trial_minutes(run_cfg, search)
    for minutes in (first, later):
        if minutes <= 0 or math.isnan(minutes):
            raise PreflightRefusal(f"the trial's time estimate is {minutes} minutes; cannot plan")
    todo = max(search.trials - done, 0)
    return SearchPlan(todo, done, later, max_minutes, search.time_budget_minutes, first)
