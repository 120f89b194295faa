"""The run's sampler and prompt embeddings, built once for admission, the run and the benchmarks."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from evalharness.assembly import encode_contexts, run_sampler
from tests.helpers.harness_config import resolved_run_config


def test_the_sampler_is_the_configs_with_the_resolutions_shift():
    cfg = resolved_run_config(["steps=4", "sampler=euler"])
    sampler = run_sampler(cfg)
    assert (sampler.name, sampler.num_steps, sampler.shift) == ("euler", 4, 3.0)  # 192x320: 480p
    assert run_sampler(resolved_run_config(["resolution=720p"])).shift == 5.0
    assert run_sampler(resolved_run_config(["resolution.flow_shift=7.0"])).shift == 7.0


class _Encoder:
    """Records the prompts of every call and whether it ran inside a session."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], bool]] = []
        self.open = False

    @contextlib.contextmanager
    def session(self):
        self.open = True
        yield
        self.open = False


@dataclasses.dataclass
class _Components:
    prompt_encoder: _Encoder

    def encode(self, prompts: list[str]) -> np.ndarray:
        self.prompt_encoder.calls.append((prompts, self.prompt_encoder.open))
        return np.full((len(prompts), 3, 2), float(len(self.prompt_encoder.calls)), np.float32)


def test_each_prompt_is_encoded_once_in_one_session_and_the_negative_only_with_guidance():
    components = _Components(_Encoder())
    cfg = resolved_run_config(["guidance_scale=5.0", "negative_prompt=blurry"])
    contexts, negative = encode_contexts(cfg, components, ["a", "b", "a"])
    assert components.prompt_encoder.calls == [(["a"], True), (["b"], True), (["blurry"], True)]
    assert list(contexts) == ["a", "b"] and contexts["b"].shape == (1, 3, 2)
    assert float(contexts["b"][0, 0, 0]) == 2.0 and float(negative[0, 0, 0]) == 3.0
    unguided = resolved_run_config(["guidance_scale=1.0"])
    assert encode_contexts(unguided, _Components(_Encoder()), ["a"]).negative is None
