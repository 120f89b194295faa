"""The run's sampler and prompt embeddings, built from its config the one way a run builds them,
so admission, the run and the benchmarks denoise with the same sampler and contexts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from evalharness.assembly.components import Components
from evalharness.config import EvalConfig
from models.pipeline import uses_guidance
from models.samplers import Sampler, default_flow_shift, make_sampler


def run_sampler(cfg: EvalConfig) -> Sampler:
    """The run's sampler: ``cfg.sampler`` over ``cfg.steps``, shifted by the resolution's
    ``flow_shift`` or, where it has none, Wan 2.1's shift for the video size.

    Raises:
        ValueError: an unknown sampler, fewer than one step or a shift <= 0.
    """
    video = cfg.resolution.video
    shift = cfg.resolution.flow_shift or default_flow_shift(video.height, video.width)
    return make_sampler(cfg.sampler.value, cfg.steps, shift)


class PromptContexts(NamedTuple):
    """Prompt embeddings for the denoising loop.

    Attributes:
        by_prompt: each distinct prompt -> its float32 [1, L, text_dim] embeddings.
        negative: the negative prompt's float32 [1, L, text_dim] embeddings, or None when the
            run's guidance does not use it.
    """

    by_prompt: dict[str, jax.Array]
    negative: jax.Array | None


def encode_contexts(
    cfg: EvalConfig, components: Components, prompts: Sequence[str]
) -> PromptContexts:
    """Encodes every distinct prompt once, one at a time, and the negative prompt when guidance
    uses it, in one session of the prompt encoder (one load on a cache miss, released before
    any denoising loop runs).

    Args:
        cfg: the run's config (guidance scale and negative prompt).
        components: the model's parts (their prompt encoder).
        prompts: the prompts, repeats allowed.

    Returns:
        The embeddings on the default device.
    """
    with components.prompt_encoder.session():
        by_prompt = {
            text: jnp.asarray(components.encode([text])) for text in dict.fromkeys(prompts)
        }
        negative = None
        if uses_guidance(cfg.guidance_scale, cfg.negative_prompt):
            negative = jnp.asarray(components.encode([cfg.negative_prompt]))
    return PromptContexts(by_prompt, negative)
