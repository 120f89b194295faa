"""Stage 2: the text encoder and transformer trained with Wan's flow-matching objective.

Each phase (``TrainSettings.flow_phases``: an optional coarse one on many small clips, then the
full-size one continuing from its weights) has a fixed pool of training clips encoded once by the
trained VAE (its posterior mean, normalised by the config's latent statistics: what the denoising
loop produces and the harness decodes). Each step draws clips from the phase's pool, a timestep
``u ~ U(0, 1)`` shifted as Wan's sampler shifts its schedule
(``σ = shift·u / (1 + (shift - 1)·u)``), noise ``ε``, and trains the transformer at
``x_σ = (1 - σ)·x₀ + σ·ε``, timestep ``1000·σ``, to predict the velocity ``ε - x₀`` (diffusers'
FlowMatch convention, the one ``models.euler`` / ``models.unipc`` integrate).
With probability ``prompt_dropout`` a prompt is replaced by an unconditional one (the empty prompt
or the harness's default negative prompt), so classifier-free guidance has an unconditional
branch. The tiny UMT5 starts from its seeded random weights and trains with the transformer; its
context is zeroed past each prompt's length, exactly as ``models.prompt_encoder`` computes it.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm import tqdm

from models.attention import WanAttention
from models.interruption import stop_if_signalled
from models.layers import FeedForward
from models.shapes_data import ClipSpec, make_clip, prompt_words
from models.shapes_language import ATTRIBUTES, parse_prompt, partial_prompt
from models.text_encoder import UMT5Encoder
from models.tiny_components import TINY_UMT5_CONFIG
from models.tokenizer import WordTokenizer, tokenize_batch
from models.training.checkpoints import saved_step
from models.training.loop import checkpoint_path, learning_rate_schedule, run_steps
from models.training.settings import UNCONDITIONAL_PROMPTS, FlowPhase, TrainSettings
from models.training.tracking import MetricLogger
from models.training.vae_stage import to_unit
from models.transformer import WanTransformer
from models.vae_encoder import WanAutoencoder, normalise


@functools.cache
def prompt_tokenizer() -> WordTokenizer:
    """The trained model's tokenizer: one id per word of the shapes language and of the
    unconditional prompts (measured over 200 steps: with bytes the loss did not yet depend on
    the prompt, with words a wrong prompt already cost 0.11 more than the right one)."""
    extra = {w for text in UNCONDITIONAL_PROMPTS for w in WordTokenizer.PATTERN.findall(text)}
    words = tuple(sorted(set(prompt_words()) | extra))
    if 3 + len(words) > TINY_UMT5_CONFIG.vocab_size:
        raise ValueError(f"{len(words)} words do not fit the tiny UMT5's vocabulary")
    return WordTokenizer(words)


def zero_init_residual_branches(transformer: WanTransformer) -> int:
    """Zeroes the output projection of every attention and feed-forward branch and the final
    projection: each block starts as its shortcut and the model as a zero velocity, which the
    flow loss reaches from 2.25 rather than 3.8 (measured at step 1). Returns how many were zeroed.
    """
    last = [node.to_out if isinstance(node, WanAttention) else node.proj_out
            for _, node in nnx.iter_graph(transformer)
            if isinstance(node, WanAttention | FeedForward)]  # fmt: skip
    for linear in [*last, transformer.proj_out]:
        linear.kernel.set_value(jnp.zeros_like(linear.kernel.get_value()))
    return len(last) + 1


class TextToVideo(nnx.Module):
    """The two trained parts of the generator: the UMT5 text encoder and the Wan transformer."""

    def __init__(self, settings: TrainSettings, *, rngs: nnx.Rngs):
        self.text_encoder = UMT5Encoder(TINY_UMT5_CONFIG, rngs=rngs)
        self.transformer = WanTransformer(settings.transformer_config(), rngs=rngs)

    def context(self, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """``[B, L, d_model]`` text context, zero past each prompt's length."""
        hidden = self.text_encoder(input_ids, attention_mask).astype(jnp.float32)
        return hidden * attention_mask[..., None]


@nnx.jit
def _encode_pool_clip(autoencoder: WanAutoencoder, video: jax.Array) -> jax.Array:
    return normalise(autoencoder.config, autoencoder.moments(video)[0])


def rendering_processes() -> int:
    """Processes that render a pool's clips: all cores but one (which encodes), at most 16."""
    return max(1, min((os.cpu_count() or 1) - 1, 16))


def rendered_clips(
    phase: FlowPhase, settings: TrainSettings
) -> Iterator[tuple[ClipSpec, np.ndarray]]:
    """A phase's training clips in order, rendered in :func:`rendering_processes` processes.

    Rendering is numpy on the host and costs more than encoding on an accelerator (measured on a
    TPU v5e host: 6 full-size clips a second rendered and encoded one after the other). The
    workers are spawned, not forked: a fork of a process running JAX's threads can deadlock.
    """
    render = functools.partial(
        make_clip, split="train", frames=phase.frames, height=phase.height, width=phase.width,
        two_shape_prob=settings.two_shape_prob, spread=settings.track_spread,
    )  # fmt: skip
    workers = rendering_processes()
    if workers == 1:
        yield from map(render, range(phase.clips))
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        try:
            yield from pool.map(render, range(phase.clips), chunksize=8)
        finally:  # stopped early (Ctrl-C): the clips not yet begun are not rendered
            pool.shutdown(cancel_futures=True)


def latent_pool(
    autoencoder: WanAutoencoder,
    settings: TrainSettings,
    run_dir: Path,
    phase: FlowPhase | None = None,
    *,
    progress: bool = True,
) -> tuple[np.ndarray, list[str]]:
    """A phase's encoded training clips ``[N, C, F, h, w]`` (float16 on disk) and their prompts.

    Written to the phase's pool and prompts files in the run folder once (a progress bar while
    it encodes), then read back. ``phase`` defaults to the full-size one.
    """
    phase = phase or settings.flow_phases()[-1]
    path, prompts_path = Path(run_dir) / phase.pool_file, Path(run_dir) / phase.prompts_file
    if path.is_file() and prompts_path.is_file():
        return np.load(path), json.loads(prompts_path.read_text())
    latents, prompts = [], []
    label = "latent pool" if phase.name == "transformer" else f"latent pool ({phase.name})"
    clips = tqdm(
        rendered_clips(phase, settings), total=phase.clips, desc=label, disable=not progress,
        dynamic_ncols=True,
    )  # fmt: skip
    for spec, frames in clips:
        stop_if_signalled()  # a safe point: Ctrl-C and SIGTERM stop between clips
        z = _encode_pool_clip(autoencoder, jnp.asarray(to_unit(frames))[None])
        latents.append(np.asarray(z[0], np.float16))
        prompts.append(spec.prompt)
    pool = np.stack(latents)
    partial = path.with_name(path.stem + ".partial.npy")
    np.save(partial, pool)
    prompts_path.write_text(json.dumps(prompts))
    partial.replace(path)
    return pool, prompts


def shifted_sigma(u: np.ndarray, shift: float) -> np.ndarray:
    """Wan's shifted noise level ``shift·u / (1 + (shift - 1)·u)`` for ``u`` in [0, 1]."""
    return shift * u / (1.0 + (shift - 1.0) * u)


def _said_in_part(prompt: str, dropout: float, rng: np.random.Generator) -> str:
    """``prompt`` with each attribute left out with chance ``dropout`` (unchanged at 0, drawing
    nothing, so runs without attribute dropout keep their batches)."""
    if not dropout:
        return prompt
    omit = [a for a in ATTRIBUTES if rng.random() < dropout]
    return partial_prompt(_parsed(prompt), omit) if omit else prompt


@functools.cache
def _parsed(prompt: str) -> ClipSpec:
    return parse_prompt(prompt)


def flow_batch(
    settings: TrainSettings,
    step: int,
    pool: np.ndarray,
    prompts: list[str],
    phase: FlowPhase | None = None,
) -> dict[str, np.ndarray]:
    """Step ``step``'s clips, prompts (some dropped), noise and noise levels (deterministic; each
    phase draws its own stream). ``phase`` defaults to the full-size one."""
    phase = phase or settings.flow_phases()[-1]
    rng = np.random.default_rng([settings.seed, phase.rng_stream, step])
    index = rng.integers(0, len(pool), phase.batch)
    texts = [
        UNCONDITIONAL_PROMPTS[int(rng.integers(len(UNCONDITIONAL_PROMPTS)))]
        if rng.random() < settings.prompt_dropout
        else _said_in_part(prompts[i], settings.attribute_dropout, rng)
        for i in index
    ]
    tokens = tokenize_batch(prompt_tokenizer(), texts, settings.text_len)
    x0 = pool[index].astype(np.float32)
    sigma = shifted_sigma(rng.random(len(index)), settings.flow_shift).astype(np.float32)
    return {
        "x0": x0,
        "noise": rng.standard_normal(x0.shape, dtype=np.float32),
        "sigma": sigma,
        "input_ids": tokens.input_ids,
        "attention_mask": tokens.attention_mask,
    }


def flow_loss(model: TextToVideo, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean squared error of the predicted velocity against ``noise - x0``."""
    x0, noise, sigma = batch["x0"], batch["noise"], batch["sigma"]
    s = sigma[:, None, None, None, None]
    noisy = (1.0 - s) * x0 + s * noise
    context = model.context(batch["input_ids"], batch["attention_mask"])
    velocity = model.transformer(noisy, sigma * 1000.0, context).astype(jnp.float32)
    return jnp.mean((velocity - (noise - x0)) ** 2)


def trained_parameters(freeze_text_encoder: bool) -> nnx.filterlib.Filter:
    """What the flow stage optimises: every parameter, or the transformer's alone when the text
    encoder is frozen."""
    if freeze_text_encoder:
        return nnx.All(nnx.Param, nnx.PathContains("transformer"))
    return nnx.Param


@functools.cache
def _train_step(frozen_text_encoder: bool):
    wrt = trained_parameters(frozen_text_encoder)

    @nnx.jit
    def step(model: TextToVideo, optimizer: nnx.Optimizer, batch: dict) -> jax.Array:
        grad = nnx.value_and_grad(flow_loss, argnums=nnx.DiffState(0, wrt))
        loss, grads = grad(model, batch)
        optimizer.update(model, grads)
        return loss

    return step


def train_flow(
    settings: TrainSettings,
    run_dir: Path,
    logger: MetricLogger,
    pool: np.ndarray,
    prompts: list[str],
    *,
    phase: FlowPhase | None = None,
    model: TextToVideo | None = None,
    progress: bool = True,
) -> TextToVideo:
    """Trains (or resumes, or reloads when done) the text encoder and transformer on ``pool``.

    Args:
        phase: which phase (default: the full-size one); its steps, batch and checkpoint.
        model: the weights to continue from (the previous phase's); a fresh model when None.
    """
    phase = phase or settings.flow_phases()[-1]
    if model is None:
        model = TextToVideo(settings, rngs=nnx.Rngs(settings.seed))
        zero_init_residual_branches(model.transformer)
    schedule = learning_rate_schedule(settings.transformer_lr, settings.warmup_steps, phase.steps)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))
    optimizer = nnx.Optimizer(model, tx, wrt=trained_parameters(bool(settings.freeze_text_encoder)))
    train_step = _train_step(bool(settings.freeze_text_encoder))

    def step(i: int) -> dict[str, float]:
        arrays = flow_batch(settings, i, pool, prompts, phase)
        batch = {k: jnp.asarray(v) for k, v in arrays.items()}
        return {phase.loss_metric: float(train_step(model, optimizer, batch))}

    run_steps(
        phase.name, phase.steps, step, run_dir, settings.checkpoint_every, logger,
        (model, optimizer), progress=progress,
    )  # fmt: skip
    return model


def train_phases(
    autoencoder: WanAutoencoder,
    settings: TrainSettings,
    run_dir: Path,
    logger: MetricLogger,
    *,
    progress: bool = True,
) -> TextToVideo:
    """Every phase in order, each from its own pool, each continuing from the one before.

    A finished phase only reloads its weights, so its pool is neither read nor encoded again: a
    run folder keeps working when its pools (the bulk of its size) are deleted, or when only its
    checkpoints were copied from the machine that trained it.
    """
    model = None
    for phase in settings.flow_phases():
        if saved_step(checkpoint_path(run_dir, phase.name)) == phase.steps:
            pool, prompts = np.empty((0,), np.float16), []
        else:
            pool, prompts = latent_pool(autoencoder, settings, run_dir, phase, progress=progress)
        model = train_flow(
            settings, run_dir, logger, pool, prompts, phase=phase, model=model, progress=progress
        )
    return model
