"""Arms: prepare (compile and warm up, no step callback), then time them interleaved."""

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import evalharness.arms.arm as arms_module
from evalharness.arms.arm import (
    ArmResult,
    NonFiniteLatents,
    prepare_arm,
    rebind_arm,
    time_arms_interleaved,
)
from models.pipeline import DenoiseLoop
from models.samplers import make_sampler

COMPILE_S = 100.0  # fake seconds a compile takes: far from every run time, so a leak shows


class _Clock:
    """Monotonic seconds that only move when fake work is done."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Output:
    """Like ``models.pipeline.DenoiseOutput``: latents and a finite flag."""

    def __init__(self, latents, finite):
        self.latents, self.finite = latents, finite


class _Compiled:
    """A fake compiled loop: each call takes the next duration and logs its label."""

    def __init__(self, label, clock, durations, log, finite):
        self.label, self.clock, self.log = label, clock, log
        self.durations, self.finite = list(durations), list(finite)
        self.calls = 0

    def __call__(self, noise, context, negative_context):
        self.clock.now += self.durations[self.calls]
        finite = self.finite[self.calls] if self.calls < len(self.finite) else True
        self.calls += 1
        self.log.append(self.label)
        return _Output(np.full((1, 16, 1, 2, 2), float(len(self.label))), finite)


class _Loops:
    """Stands in for ``DenoiseLoop``: records its keyword arguments, compiles to a ``_Compiled``."""

    def __init__(self, clock, durations, finite=None):
        self.clock, self.durations, self.finite = clock, durations, finite or {}
        self.built, self.compiled, self.log = [], {}, []

    def __call__(self, model, sampler, **kwargs):
        self.built.append(kwargs)
        label = model  # the tests pass the arm's label as its "model"
        loops = self

        class Loop:
            def compile(self, noise, context, negative_context):
                loops.clock.now += COMPILE_S
                compiled = _Compiled(
                    label,
                    loops.clock,
                    loops.durations[label],
                    loops.log,
                    loops.finite.get(label, []),
                )
                loops.compiled[label] = compiled
                return compiled

        return Loop()


SAMPLER = SimpleNamespace(timesteps=np.zeros(4))


def _prepare(loops, clock, blocked, label, **kwargs):
    return prepare_arm(
        label,
        label,
        SAMPLER,
        guidance_scale=5.0,
        attend=None,
        noise="noise",
        context="context",
        negative_context=None,
        clock=clock,
        block=blocked.append,
        **kwargs,
    )


@pytest.fixture
def fakes(monkeypatch):
    clock = _Clock()
    # First duration of each arm is its warm-up; the rest are the timed runs.
    durations = {
        "dense": [50.0, 4.0, 6.0, 5.0, 7.0],
        "sparse": [40.0, 1.0, 3.0, 2.0, 2.5],
        "noise_floor": [30.0, 3.0, 3.5, 4.5, 4.0],
    }
    loops = _Loops(clock, durations)
    monkeypatch.setattr(arms_module, "DenoiseLoop", loops)
    return clock, loops


def test_prepare_arm_compiles_without_a_step_callback_and_warms_up_once(fakes):
    clock, loops = fakes
    blocked, events = [], []
    arm = _prepare(loops, clock, blocked, "sparse", on_event=events.append)
    built = {"guidance_scale": 5.0, "attend": None, "on_step": None, "guidance_passes": "joint"}
    assert loops.built == [built]
    assert loops.compiled["sparse"].calls == 1 and len(blocked) == 1
    assert (arm.compile_s, arm.warmup_s, arm.steps) == (COMPILE_S, 40.0, 4)
    assert arm.args == ("noise", "context", None)
    assert isinstance(arm.latents, np.ndarray) and arm.latents.shape == (1, 16, 1, 2, 2)
    assert any("compiling" in e for e in events) and any("warm-up" in e for e in events)


def test_prepare_arm_refuses_non_finite_warm_up(fakes, monkeypatch):
    clock, loops = fakes
    loops.finite = {"sparse": [False]}
    with pytest.raises(NonFiniteLatents, match="sparse arm produced NaN or Inf.*warm-up"):
        _prepare(loops, clock, [], "sparse")


def test_rebind_runs_the_same_compiled_loop_on_new_inputs_without_compiling(fakes):
    clock, loops = fakes
    blocked = []
    shaped = (np.zeros((1, 16, 1, 2, 2)), np.zeros((1, 4, 8)), None)
    arm = _prepare(loops, clock, blocked, "sparse")
    arm = arm.__class__(**{**arm.__dict__, "args": shaped})
    other = (np.ones((1, 16, 1, 2, 2)), np.ones((1, 4, 8)), None)
    start = clock.now
    rebound = rebind_arm(arm, other, clock=clock, block=blocked.append)
    # No compile: only the warm-up's fake seconds (the second duration) passed.
    assert clock.now - start == 1.0 and rebound.warmup_s == 1.0
    assert rebound.compiled is arm.compiled and rebound.compile_s == COMPILE_S
    assert rebound.args is other and loops.compiled["sparse"].calls == 2
    for bad, name in (
        ((np.ones((1, 16, 2, 2, 2)), other[1], None), "noise"),
        ((other[0], other[1], np.ones((1, 4, 8))), "negative context"),
    ):
        with pytest.raises(ValueError, match=f"the {name} has shape"):
            rebind_arm(arm, bad, clock=clock, block=blocked.append)


def test_interleaved_timing_excludes_compile_and_warm_up(fakes):
    clock, loops = fakes
    prep_blocked = []
    prepared = {
        label: _prepare(loops, clock, prep_blocked, label)
        for label in ("dense", "sparse", "noise_floor")
    }
    loops.log.clear()
    blocked, events = [], []
    wall = iter(range(1000, 2000))
    times = time_arms_interleaved(
        prepared,
        4,
        clock=clock,
        block=blocked.append,
        wall_clock=lambda: next(wall),
        on_event=events.append,
    )
    assert loops.log == ["dense", "sparse", "noise_floor"] * 4
    # Exactly warm_runs timed calls per arm, after its one warm-up.
    assert {label: c.calls for label, c in loops.compiled.items()} == dict.fromkeys(prepared, 5)
    assert len(blocked) == 12  # one block per timed run
    assert times["dense"].runs_s == (4.0, 6.0, 5.0, 7.0)  # no 100 s compile, no 50 s warm-up
    assert (times["dense"].median_s, times["dense"].min_s, times["dense"].max_s) == (5.5, 4.0, 7.0)
    assert times["sparse"].median_s == 2.25 and times["sparse"].per_step_s == 2.25 / 4
    assert times["noise_floor"].runs_s == (3.0, 3.5, 4.5, 4.0)
    # Wall-clock reads: a start before each arm's first run, an end after every run. Round 1 reads
    # 0-5 (start, end per arm), rounds 2-4 one end each: dense ends last at read 12.
    assert (times["dense"].timed_from, times["dense"].timed_until) == (1000, 1012)
    assert (times["noise_floor"].timed_from, times["noise_floor"].timed_until) == (1004, 1014)
    assert events[0] == "timing dense, sparse, noise_floor interleaved: 4 rounds"
    assert len(events) == 5


def test_odd_rounds_median(fakes):
    clock, loops = fakes
    prepared = {label: _prepare(loops, clock, [], label) for label in ("dense", "sparse")}
    times = time_arms_interleaved(prepared, 3, clock=clock, block=lambda out: None)
    assert times["dense"].median_s == 5.0 and times["sparse"].median_s == 2.0
    assert times["dense"].median_s / times["sparse"].median_s == pytest.approx(2.5)


def test_a_timed_run_that_turns_non_finite_raises(fakes):
    clock, loops = fakes
    loops.finite = {"sparse": [True, True, False]}  # warm-up and round 1 fine, round 2 not
    prepared = {label: _prepare(loops, clock, [], label) for label in ("dense", "sparse")}
    with pytest.raises(NonFiniteLatents, match="sparse arm produced NaN or Inf.*timed run"):
        time_arms_interleaved(prepared, 3, clock=clock, block=lambda out: None)


@pytest.mark.parametrize("warm_runs", [0, -2])
def test_interleaved_refuses_fewer_than_one_run(fakes, warm_runs):
    clock, loops = fakes
    prepared = {"dense": _prepare(loops, clock, [], "dense")}
    with pytest.raises(ValueError, match="warm_runs must be >= 1"):
        time_arms_interleaved(prepared, warm_runs, clock=clock, block=lambda out: None)
    assert loops.compiled["dense"].calls == 1  # refused before any run


def test_prepared_arm_result_carries_latents_and_times(fakes):
    clock, loops = fakes
    arm = _prepare(loops, clock, [], "dense")
    times = time_arms_interleaved({"dense": arm}, 2, clock=clock, block=lambda out: None)
    result = arm.result(times["dense"])
    assert isinstance(result, ArmResult)
    assert result.label == "dense" and result.latents is arm.latents
    assert (result.compile_s, result.warmup_s, result.times) == (COMPILE_S, 50.0, times["dense"])
    assert result.frames is None and arm.result(None).times is None


class _Scale(nnx.Module):
    def __init__(self):
        self.scale = nnx.Param(jnp.full((), 0.5))

    def __call__(self, latents, timestep, context, attend=None, step=0):
        return latents * self.scale[...]


def test_real_loop_prepared_and_interleaved_matches_a_plain_compiled_loop():
    sampler = make_sampler("euler", 2, 3.0)
    noise = jnp.linspace(-1.0, 1.0, 64).reshape(1, 16, 1, 2, 2)
    context = jnp.ones((1, 4, 8))
    kwargs = dict(
        guidance_scale=1.0, attend=None, noise=noise, context=context, negative_context=None
    )
    model = _Scale()
    prepared = {
        label: prepare_arm(label, model, sampler, **kwargs) for label in ("dense", "sparse")
    }
    times = time_arms_interleaved(prepared, 2)
    loop = DenoiseLoop(model, sampler, guidance_scale=1.0)
    reference = loop.compile(noise, context, None)(noise, context, None)
    for label, arm in prepared.items():
        np.testing.assert_array_equal(arm.result(times[label]).latents, reference.latents)
        assert len(times[label].runs_s) == 2 and times[label].steps == 2
        assert times[label].timed_from <= times[label].timed_until
