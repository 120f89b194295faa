"""``python -m evalharness.bench.head_mass``: are the model's heads spatial or temporal, as SVG assumes?

Sparse VideoGen's premise is that each head puts most of its mass either inside its own frame
(*spatial*) or at its own position across frames (*temporal*), so one band mask keeps almost all
of it. This measures it on the job's model (or any ``model=``) at the schedule's density and
tiles: the dense arm of the job's (prompt, seed) gives final latents ``x0``; at some sparse steps
``x0`` is noised to that step's level with the run's own noise (``(1-σ)·x0 + σ·ε``) and one
conditional forward captures every layer's q and k; per layer and head it reports the share of
attention mass (softmax over all keys, averaged over every query) inside the spatial band
(frame-major) and the temporal band (temporal layout), and the router's choice (the run's
sampled routing with the run's key). A head is the kind whose band holds more of its mass; the
summary counts both and how often the router agrees. The full attention matrix is formed per
head, so larger token counts than CPU presets are refused.

Usage:
    python -m evalharness.bench.head_mass [--at first middle last] [--json] [OVERRIDE ...]
    python -m evalharness.bench.head_mass model=tiny model.checkpoint=DIR/checkpoint  # your own
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from evalharness.assembly import (
    build_attention,
    build_components,
    encode_contexts,
    run_sampler,
    transformer_config_for,
)
from evalharness.bench.mlflow_record import emit
from evalharness.bench.report import report_markdown
from evalharness.bench.run_config import bench_parser, config_or_exit
from evalharness.config import EvalConfig
from evalharness.formatting import markdown_table
from evalharness.machine import machine_info
from kernels.masks.geometry import TokenGeometry
from kernels.masks.layouts import temporal_position
from models.attention import dense_attention
from models.pipeline import DenoiseLoop
from models.video_geometry import VideoGeometry

# Every head's full [N, N] probabilities are formed: 8,192 tokens is 256 MiB per head in float32.
MAX_TOKENS = 8192
STEP_CHOICES = ("first", "middle", "last")


@dataclasses.dataclass(frozen=True)
class HeadMass:
    """One head at one step: mean share of its mass inside each band (0..1), ``kind`` (the band
    holding more) and ``routed`` (the router's choice, or "dense" on a dense layer)."""

    step: int
    layer: int
    head: int
    spatial: float
    temporal: float
    kind: str
    routed: str


@dataclasses.dataclass(frozen=True)
class MassReport:
    """Every (step, layer, head)'s masses, and the fraction of (query, key) pairs each band
    keeps."""

    heads: list[HeadMass]
    spatial_band_share: float
    temporal_band_share: float

    def kinds(self) -> dict[str, int]:
        """How many rows are of each kind."""
        return {k: sum(h.kind == k for h in self.heads) for k in ("spatial", "temporal")}

    def router_agreement(self) -> float | None:
        """Share of routed rows whose route is their kind (None when no row is routed)."""
        routed = [h for h in self.heads if h.routed != "dense"]
        return sum(h.routed == h.kind for h in routed) / len(routed) if routed else None


def steps_at(choices: Sequence[str], dense_steps: int, steps: int) -> list[int]:
    """The sparse steps named by ``choices`` (first, middle, last of the sparse steps)."""
    if dense_steps >= steps:
        raise ValueError("the schedule has no sparse step; pick a sparse schedule")
    named = {
        "first": dense_steps,
        "middle": (dense_steps + steps - 1) // 2,
        "last": steps - 1,
    }
    return sorted({named[c] for c in choices})


def band_masks(mask, geometry: TokenGeometry) -> tuple[np.ndarray, np.ndarray]:
    """bool ``[N, N]`` pairs (frame-major query, frame-major key) each band keeps: the mask in
    the frame-major layout, and the mask in the temporal layout mapped back to frame-major."""
    index = np.arange(geometry.tokens)
    spatial = np.asarray(mask.allowed(index[:, None], index[None, :]))
    position = temporal_position(index, geometry)
    temporal = np.asarray(mask.allowed(position[:, None], position[None, :]))
    return spatial, temporal


def head_masses(
    q: jax.Array, k: jax.Array, spatial: jax.Array, temporal: jax.Array
) -> tuple[np.ndarray, np.ndarray]:
    """Mean mass inside each band per head: two float ``[heads]`` for ``q``, ``k`` of
    ``[1, N, H, D]``."""

    @jax.jit
    def one(qh, kh):
        probs = jax.nn.softmax((qh @ kh.T) / np.sqrt(qh.shape[-1]), axis=-1)
        return jnp.mean(jnp.sum(probs * spatial, -1)), jnp.mean(jnp.sum(probs * temporal, -1))

    out = [one(q[0, :, h].astype(jnp.float32), k[0, :, h].astype(jnp.float32))
           for h in range(q.shape[2])]  # fmt: skip
    return np.asarray([s for s, _ in out]), np.asarray([t for _, t in out])


def _dense_video(cfg: EvalConfig, video: VideoGeometry, components, sampler, dense_attend):
    """The dense arm's final latents ``x0`` of the job's (prompt, seed), its noise and context."""
    contexts, negative = encode_contexts(cfg, components, [cfg.prompt])
    context = contexts[cfg.prompt]
    noise = jax.random.normal(jax.random.key(cfg.seed), (1, *video.latent_shape()), jnp.float32)
    loop = DenoiseLoop(
        components.transformer, sampler, guidance_scale=cfg.guidance_scale, attend=dense_attend
    )
    return loop(noise, context, negative).latents, noise, context


@nnx.jit
def _capture_qkv(model, latents, timestep, context):
    """Every layer's self-attention ``(q, k, v)`` of one conditional forward."""
    captured = {}

    def attend(q, k, v, *, step, layer):
        captured[layer] = (q, k, v)
        return dense_attention(q, k, v)

    model(latents, timestep, context, attend=attend)
    return captured


def measure(cfg: EvalConfig, at: Sequence[str] = STEP_CHOICES) -> MassReport:
    """The masses of every head of ``cfg``'s model at the sparse steps named by ``at``."""
    if not cfg.schedule.sparse:
        raise ValueError(f"schedule={cfg.schedule.name} is dense; pick a sparse schedule")
    video = cfg.resolution.video
    tcfg = transformer_config_for(cfg.model)
    setup = build_attention(cfg, video, tcfg)
    geometry = setup.geometry
    if geometry.tokens > MAX_TOKENS:
        raise ValueError(
            f"{geometry.tokens} tokens: this forms every head's full attention matrix; use a "
            f"resolution of at most {MAX_TOKENS} tokens (e.g. resolution=cpu)"
        )
    policy = setup.sparse
    steps = steps_at(at, setup.schedule.dense_steps(cfg.steps), cfg.steps)
    sampler = run_sampler(cfg)
    components = build_components(cfg.model, cfg.dtype, cfg.cache_dir)
    x0, noise, context = _dense_video(cfg, video, components, sampler, setup.dense)
    spatial_band, temporal_band = band_masks(policy.routing_mask, geometry)
    heads = []
    dense_layers = setup.schedule.dense_layers(tcfg.num_layers)
    for step in steps:
        sigma = float(sampler.sigmas[step])
        latents = (1.0 - sigma) * x0 + sigma * noise
        timestep = jnp.full((1,), float(sampler.timesteps[step]))
        captured = _capture_qkv(components.transformer, latents, timestep, context)
        for layer in range(tcfg.num_layers):
            q, k, v = captured[layer]
            spatial, temporal = head_masses(
                q, k, jnp.asarray(spatial_band), jnp.asarray(temporal_band)
            )
            if layer < dense_layers:
                routed = ["dense"] * len(spatial)
            else:
                # The sparse arm's own routing (its seed, samples and mode) of this cell.
                flags = np.asarray(policy.route(q, k, v, step=step, layer=layer).temporal)
                routed = ["temporal" if f else "spatial" for f in flags[0]]
            for head, (s, t) in enumerate(zip(spatial, temporal, strict=True)):
                kind = "temporal" if t > s else "spatial"
                heads.append(HeadMass(step, layer, head, float(s), float(t), kind, routed[head]))
    n = geometry.tokens
    return MassReport(heads, float(spatial_band.sum()) / n**2, float(temporal_band.sum()) / n**2)


_COLUMNS = (
    ("step", "step", "{}"),
    ("layer", "layer", "{}"),
    ("head", "head", "{}"),
    ("mass in spatial band", "spatial", "{:.3f}"),
    ("mass in temporal band", "temporal", "{:.3f}"),
    ("kind (more mass)", "kind", "{}"),
    ("router", "routed", "{}"),
)


def format_report(report: MassReport, setup: dict) -> str:
    """The report as Markdown."""
    kinds = report.kinds()
    agreement = report.router_agreement()
    both = (
        "both head kinds appear"
        if all(kinds.values())
        else f"only {'spatial' if kinds['spatial'] else 'temporal'} heads appear"
    )
    agree = "no routed layer" if agreement is None else f"the router agrees on {agreement:.0%}"
    return report_markdown(
        "Attention mass inside the schedule's spatial and temporal bands",
        setup,
        markdown_table([dataclasses.asdict(h) for h in report.heads], _COLUMNS),
        f"The bands keep {report.spatial_band_share:.1%} (spatial) and "
        f"{report.temporal_band_share:.1%} (temporal) of pairs. {kinds['spatial']} spatial "
        f"and {kinds['temporal']} temporal (step, layer, head) rows: {both}; {agree}.",
        machine_info(),
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 2 on a setting this cannot measure."""
    parser = bench_parser("evalharness.bench.head_mass", __doc__, "schedule=aggressive")
    parser.add_argument(
        "--at", nargs="+", default=list(STEP_CHOICES), choices=STEP_CHOICES,
        help="which sparse steps (default: first, middle and last)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cfg = config_or_exit(parser, args.overrides)
    try:
        report = measure(cfg, args.at)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    setup = {
        "model": cfg.model.name,
        "resolution": f"{cfg.resolution.frames}x{cfg.resolution.height}x{cfg.resolution.width}",
        "schedule": f"{cfg.schedule.name} (density {cfg.schedule.density})",
        "prompt": repr(cfg.prompt),
        "seed": cfg.seed,
    }
    record = {
        "setup": setup,
        "machine": machine_info(),
        **dataclasses.asdict(report),
        "kinds": report.kinds(),
        "router_agreement": report.router_agreement(),
    }
    emit(args, record, format_report(report, setup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
