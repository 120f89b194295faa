"""Every setting of a training run, as one frozen dataclass with named presets.

``full`` is the shipped model's plan (its VAE about 35 minutes on a quiet 2-core CPU,
its transformer minutes on one accelerator chip and hours on a CPU; see ``docs/models.md``);
``smoke`` trains a few steps of a much smaller model for tests. A run's settings are written
beside its checkpoints and its exported weights, and a resumed run must have the same ones.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from models.config import WanTransformerConfig, get_transformer_config
from models.tiny_components import TINY_UMT5_CONFIG, TINY_VAE_CONFIG
from models.vae import WanVAEConfig

# The harness's default negative prompt (evalharness' config) beside the empty prompt: the
# unconditional branch of classifier-free guidance sees either, so both are trained as "no prompt".
UNCONDITIONAL_PROMPTS = ("", "blurry, low quality, static, distorted")


# The architecture the training builds by default: the ``tiny`` preset's.
_SHAPES = get_transformer_config("tiny")

_MAY_BE_ZERO = (
    "seed",
    "warmup_steps",
    "vae_clip_steps",
    "vae_decoder_steps",
    "coarse_steps",
    "freeze_text_encoder",
)


@dataclasses.dataclass(frozen=True)
class FlowPhase:
    """One phase of the transformer's training: the clip size, its pool and its steps.

    Attributes:
        name: the stage name (its checkpoint ``checkpoints/<name>.npz``, its progress bar).
        frames, height, width: the pixel size of its clips.
        clips: the clips encoded once into its pool.
        steps, batch: its optimisation.
    """

    name: str
    frames: int
    height: int
    width: int
    clips: int
    steps: int
    batch: int

    @property
    def pool_file(self) -> str:
        """The pool's file name in the run folder (``latents.npy`` for the full-size phase)."""
        return "latents.npy" if self.name == "transformer" else f"latents-{self.name}.npy"

    @property
    def prompts_file(self) -> str:
        """The file of its pool's prompts (``prompts.json`` for the full-size phase)."""
        return self.pool_file.replace("latents", "prompts").replace(".npy", ".json")

    @property
    def rng_stream(self) -> int:
        """Its batches' random stream (the full-size phase keeps the single-phase stream)."""
        return 2 if self.name == "transformer" else 3

    @property
    def loss_metric(self) -> str:
        """The name its loss is logged under."""
        return "flow_loss" if self.name == "transformer" else "coarse_flow_loss"


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """One training run.

    Attributes:
        seed: decides the initial weights, every clip, every noise draw and every dropout.
        frames, height, width: the video size the transformer trains at (the CPU preset's,
            ``conf/resolution/cpu.yaml``).
        vae_steps, vae_batch, vae_lr: the autoencoder's optimisation.
        vae_crop_frames, vae_crop_size: the autoencoder trains on crops (it is convolutional).
        vae_clip_steps, vae_clip_crop_size, vae_clip_batch: the last ``vae_clip_steps`` steps
            train on crops as long as the whole clip (``frames``), ``vae_clip_crop_size`` pixels
            wide, ``vae_clip_batch`` at a time. Short crops teach the code fast, but a causal
            VAE trained only on them drifts on later frames (measured: 33 dB on frames 0-9 of a
            held-out clip, 16 dB on frame 32); the whole-length steps remove the drift.
        vae_kl_weight: weight of the KL term (on the encoder's mean and log-variance) against the
            squared error of the mean's reconstruction.
        vae_stat_clips: full-size clips whose latents set ``latents_mean`` / ``latents_std``.
        vae_decoder_steps, vae_decoder_lr, vae_decoder_crop_size, vae_decoder_batch: after the
            autoencoder, its decoder alone trains on whole-length crops this wide, the encoder
            frozen, so the latents (and their statistics, and every pool the transformer trains
            on) stay as they were (``vae_decoder_steps=0``: no such stage). Measured on the
            shipped VAE: 600 steps of 96-pixel crops at 3e-4 took held-out PSNR from 29.99 to
            32.21 dB.
        coarse_frames, coarse_height, coarse_width: the video size of the coarse phase, where a
            step costs about a quarter of a full-size one.
        coarse_clips, coarse_steps, coarse_batch: the coarse phase's pool of encoded clips and
            its optimisation (``coarse_steps=0``: no coarse phase). Its purpose is many examples:
            with one pool of 384 full-size clips (half the training combinations, each seen
            once) the model drew training prompts (colour right in 88% of them) but not
            held-out ones (17%, chance): it learned whole prompts, not their words.
        latent_clips: full-size training clips encoded once for the full-size phase.
        transformer_steps, transformer_batch, transformer_lr: the full-size phase's
            optimisation (it continues from the coarse phase's weights); the learning rate is
            both phases' peak.
        warmup_steps: linear learning-rate warm-up of both stages.
        flow_shift: the flow shift of the timestep distribution (Wan's 3.0 at 480p and below).
        prompt_dropout: chance that a training prompt is replaced by an unconditional one.
        attribute_dropout: chance that each attribute (colour, shape, motion, background) is
            left out of a kept training prompt (``models.shapes_language.partial_prompt``), so
            each word carries its own meaning.
        freeze_text_encoder: 1 keeps the tiny UMT5 at its seeded random weights (only the
            transformer learns to read it); 0 trains it with the transformer.
        two_shape_prob: chance of a second object in a training clip.
        track_spread: how far the transformer's training tracks may start from the centred
            track (``models.shapes_data.object_tracks``; 1: anywhere in the frame). Near the
            centre, where the object starts and ends says its direction even at the highest
            noise, the only place the prompt's direction word changes the flow loss.
        num_layers, num_heads, head_dim, ffn_dim, text_len: the transformer's size (the
            ``tiny`` preset's by default: four blocks of 4 heads x 64); ``text_dim`` is the
            tiny UMT5's width.
        vae_base_dim: the VAE's base channel count (the tiny preset's 8 by default).
        checkpoint_every: steps between resumable checkpoints.
    """

    seed: int = 0
    frames: int = 33
    height: int = 192
    width: int = 320
    vae_steps: int = 2400
    vae_batch: int = 4
    vae_lr: float = 2e-3
    vae_crop_frames: int = 9
    vae_crop_size: int = 64
    vae_clip_steps: int = 900
    vae_clip_crop_size: int = 48
    vae_clip_batch: int = 2
    vae_kl_weight: float = 1e-6
    vae_stat_clips: int = 16
    vae_decoder_steps: int = 0
    vae_decoder_lr: float = 3e-4
    vae_decoder_crop_size: int = 96
    vae_decoder_batch: int = 2
    coarse_frames: int = 17
    coarse_height: int = 96
    coarse_width: int = 160
    coarse_clips: int = 3000
    coarse_steps: int = 0
    coarse_batch: int = 4
    latent_clips: int = 384
    transformer_steps: int = 1500
    transformer_batch: int = 2
    transformer_lr: float = 1e-3
    warmup_steps: int = 50
    flow_shift: float = 3.0
    prompt_dropout: float = 0.1
    attribute_dropout: float = 0.0
    freeze_text_encoder: int = 0
    two_shape_prob: float = 0.15
    track_spread: float = 1.0
    num_layers: int = _SHAPES.num_layers
    num_heads: int = _SHAPES.num_attention_heads
    head_dim: int = _SHAPES.attention_head_dim
    ffn_dim: int = _SHAPES.ffn_dim
    text_len: int = _SHAPES.text_len
    vae_base_dim: int = 8
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(f.default, float):
                number = not isinstance(value, bool) and isinstance(value, int | float)
                if not number or not math.isfinite(value) or value < 0:
                    raise ValueError(
                        f"{f.name}={value!r}: must be a finite number >= 0 (e.g. its default "
                        f"{f.default:g})"
                    )
                continue
            low = 0 if f.name in _MAY_BE_ZERO else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{f.name}={value!r}: must be an integer >= {low}")
        sizes = {"": (self.frames, self.height, self.width)}
        if self.coarse_steps:
            sizes["coarse "] = (self.coarse_frames, self.coarse_height, self.coarse_width)
        for label, (frames, height, width) in sizes.items():
            if (frames - 1) % 4 or height % 16 or width % 16:
                raise ValueError(
                    f"{label}video {frames}x{height}x{width}: frames must be 4k+1 and "
                    "height/width multiples of 16 (e.g. 33x192x320)"
                )
        if (self.vae_crop_frames - 1) % 4 or self.vae_crop_size % 16:
            raise ValueError(
                f"vae crop {self.vae_crop_frames} frames of {self.vae_crop_size} px: frames must "
                "be 4k+1 and the size a multiple of 16 (e.g. 9 and 64)"
            )
        for name in ("vae_crop_size", "vae_clip_crop_size", "vae_decoder_crop_size"):
            size = getattr(self, name)
            if size % 16 or size > min(self.height, self.width):
                raise ValueError(
                    f"{name}={size}: must be a multiple of 16 within the frame's short side "
                    f"{min(self.height, self.width)}"
                )
        if self.vae_clip_steps > self.vae_steps:
            raise ValueError(
                f"vae_clip_steps={self.vae_clip_steps} exceeds vae_steps={self.vae_steps}: the "
                "whole-length steps are the last of the VAE's steps"
            )
        if min(self.vae_lr, self.vae_decoder_lr, self.transformer_lr, self.flow_shift) <= 0:
            raise ValueError(
                f"vae_lr={self.vae_lr}, vae_decoder_lr={self.vae_decoder_lr}, transformer_lr="
                f"{self.transformer_lr}, flow_shift={self.flow_shift}: each must be > 0"
            )
        if not 0 <= self.prompt_dropout < 1 or not 0 <= self.two_shape_prob <= 1:
            raise ValueError(
                f"prompt_dropout={self.prompt_dropout} must be in [0, 1) and two_shape_prob="
                f"{self.two_shape_prob} in [0, 1]"
            )
        if not 0 <= self.track_spread <= 1:
            raise ValueError(f"track_spread={self.track_spread} must be in [0, 1]")
        if not 0 <= self.attribute_dropout < 1 or self.freeze_text_encoder not in (0, 1):
            raise ValueError(
                f"attribute_dropout={self.attribute_dropout} must be in [0, 1) and "
                f"freeze_text_encoder={self.freeze_text_encoder} 0 or 1"
            )

    def flow_phases(self) -> tuple[FlowPhase, ...]:
        """The transformer's training phases in order: the coarse one (when it has steps), then
        the full-size one."""
        full = FlowPhase(
            "transformer", self.frames, self.height, self.width, self.latent_clips,
            self.transformer_steps, self.transformer_batch,
        )  # fmt: skip
        if not self.coarse_steps:
            return (full,)
        coarse = FlowPhase(
            "transformer-coarse", self.coarse_frames, self.coarse_height, self.coarse_width,
            self.coarse_clips, self.coarse_steps, self.coarse_batch,
        )  # fmt: skip
        return coarse, full

    def transformer_config(self) -> WanTransformerConfig:
        """The transformer's architecture: the ``tiny`` preset's, resized by these
        settings."""
        return dataclasses.replace(
            _SHAPES,
            num_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            attention_head_dim=self.head_dim,
            ffn_dim=self.ffn_dim,
            text_dim=TINY_UMT5_CONFIG.d_model,
            text_len=self.text_len,
        )

    def vae_config(self) -> WanVAEConfig:
        """The VAE's architecture (its latent statistics are set after it is trained)."""
        z = TINY_VAE_CONFIG.z_dim
        return dataclasses.replace(
            TINY_VAE_CONFIG,
            base_dim=self.vae_base_dim,
            latents_mean=(0.0,) * z,
            latents_std=(1.0,) * z,
        )

    def to_json(self) -> str:
        """The settings as JSON (field order)."""
        return json.dumps(dataclasses.asdict(self), indent=2)


PRESETS: dict[str, TrainSettings] = {
    # The plan the shipped model was trained with (models/weights/tiny, docs/models.md): four
    # blocks; 12,000 steps on many small clips (what met the fidelity bar at 17 x 96 x 160),
    # prompts said in part, the text encoder frozen, tracks near the centre, then 4,000
    # full-size steps on 1,536 clips; 600 decoder steps after the VAE (the shipped folder got
    # them from models.training.refine_decoder, 27 minutes on a 2-core CPU). The VAE takes
    # about 35 minutes on a quiet 2-core CPU; the transformer's phases are the bulk: on one TPU
    # v5e chip about 6 and 5 minutes (35 and 12.7 steps a second, measured), on a 2-core CPU
    # about 2.6 and 12 hours (scaled from 0.39 s per coarse step of 4 clips and 2.65 s per
    # full-size step of 2, measured).
    "full": TrainSettings(
        vae_decoder_steps=600,
        coarse_steps=12000,
        coarse_batch=8,
        attribute_dropout=0.25,
        freeze_text_encoder=1,
        track_spread=0.3,
        latent_clips=1536,
        transformer_steps=4000,
        transformer_batch=8,
        checkpoint_every=500,
    ),
    # Seconds on a CPU: a small video, a one-block transformer, a few steps of each stage.
    "smoke": TrainSettings(
        frames=5,
        height=32,
        width=48,
        vae_steps=12,
        vae_batch=2,
        vae_crop_frames=5,
        vae_crop_size=32,
        vae_clip_steps=4,
        vae_clip_crop_size=32,
        vae_clip_batch=1,
        vae_stat_clips=2,
        vae_decoder_steps=4,
        vae_decoder_crop_size=32,
        vae_decoder_batch=1,
        latent_clips=4,
        transformer_steps=12,
        transformer_lr=2e-3,
        warmup_steps=0,
        num_layers=1,
        num_heads=2,
        head_dim=16,
        ffn_dim=32,
        text_len=64,
        vae_base_dim=4,
        checkpoint_every=6,
    ),
}


def preset(name: str, **overrides: Any) -> TrainSettings:
    """The preset ``name`` with some fields replaced.

    Raises:
        ValueError: an unknown preset or field (the known ones are listed).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown training preset {name!r}; known: {', '.join(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(TrainSettings)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown training settings {unknown}; known: {', '.join(sorted(fields))}")
    return dataclasses.replace(PRESETS[name], **overrides)


def read_settings(path: Path) -> TrainSettings:
    """Settings written by :meth:`TrainSettings.to_json`."""
    return TrainSettings(**json.loads(Path(path).read_text()))
