"""Planted spatial and temporal self-attention heads: a seeded model whose attention has structure.

Random weights give diffuse attention, which a sparse mask barely changes, so a broken sparse arm
would pass any quality gate. This module rewrites a ``WanTransformer``'s self-attention so that
every head behaves like one of Sparse VideoGen's two head types, with no training.

Construction (per head, applied after ``WanTransformer`` has drawn its random weights):

- q and k are constant vectors, the same for every token: the q/k projections' bias is the vector
  (up to the RMSNorm's rescaling) and their weights are shrunk to ``qk_weight_scale`` of the random
  draw, so the content-dependent part of every score is a small jitter. The q/k RMSNorm weights
  scale the normalised bias back to the vector (RMSNorm runs over all heads' channels at once, so
  the bias alone could not set the size).
- After Wan's 3-D RoPE, channel pair (2i, 2i+1) rotates by ``theta_i * position`` along one axis
  (time, height or width, ``models.rope``). With key pair (r, 0) and query pair r (cos a, sin a),
  the pair adds ``r^2 cos(a - theta_i d) / sqrt(D)`` to the score of a key at offset d (key minus
  query) along that axis; the score is the sum over pairs, so each axis is shaped on its own and an
  axis with no energy is ignored.
- A peak (a = 0) on an axis puts 0.7 / 0.15 / 0.15 of the axis's energy on its three
  fastest-rotating pairs: the score is highest at offset 0, and every other offset up to
  ``MAX_OFFSET`` scores at least ``sharpness`` nats lower (the fastest pair alone would alias:
  cos(6) is almost 1 again; the slower two break that up).
- *Spatial* head: peaks on time and width, and a mild preference for nearby rows,
  ``row_falloff * cos(0.158 dy)`` on the slowest of the height axis's three pairs (0.5 nats down
  at 4 rows, 1.7 at 8, 2.9 at 11). It attends to the keys of its own frame in its own column, spread
  over the rows (12 tokens at the default resolution). They lie in the frame-major band (which
  covers the whole frame at the default density; the falloff makes the rows that the aggressive
  band cuts off lighter); the temporal layout's band only reaches the query's neighbouring rows,
  so under the wrong mask the head loses most of its keys.
- *Temporal* head: peaks on height and width, and a causal time profile
  ``f(d) = 0.06 cos(d) - 0.18 sin(d) - 0.30 sin(0.464 d) - 0.47 sin(0.215 d)`` (time pairs 0-2;
  the frequencies are head_dim 64's). It attends to its own (y, x) in earlier frames, mostly two
  or more frames back; later frames score at least ``sharpness`` below its own frame. Every key it
  needs lies in the temporal layout's band; in frame-major order the band holds only the frame
  before and frame 0 (the sink), so under the wrong mask it loses the frames in between. The
  temporal layout (Sparse VideoGen's, ``kernels.masks.layouts``) gives every query, frame 0's too,
  its own position in every frame, so a two-sided profile would be served as well; the causal one
  is kept because the strengths below and the negative controls were calibrated on it.
- The value path carries what a wrong mask corrupts. ``to_v`` keeps its random weights, times a
  gain per head kind: a spatial head averages its column's keys, which shrinks its output by about
  sqrt(12), while a temporal head is dominated by a few frames, so spatial heads get the larger
  gain (4.5 against 2) and both kinds weigh about alike in the block's output. The
  self-attention's residual gate (the block's ``scale_shift_table`` entry 2) is raised by
  ``gate_bias``, so attention dominates the residual stream, and the output projection
  (``proj_out``) is scaled by ``output_gain``, so the predicted velocity, not the initial noise,
  dominates the final latents. Attention over the wrong keys then changes the decoded frames far
  beyond the sparse mask's own error. The strengths were calibrated on the default job (``python
  -m evalharness.bench.negative_controls``): every broken arm at least 5 dB under the CI gate's
  25 dB, the correct arm far above it.

Which head is which is ``planted_layout``: in block l, head h is spatial when ``h + l`` is even, so
each block holds both kinds and the same head index changes kind from block to block.

The shapes hold for videos of up to ``MAX_PLANTED_FRAMES`` latent frames and ``MAX_OFFSET + 1``
tokens per side (the default CPU resolution is 9 x 12 x 20); larger videos still run, with heads
that alias beyond those offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from models.rope import axis_frequencies, rope_axis_dims
from models.transformer import WanTransformer

HEAD_KINDS = ("spatial", "temporal")
# Bumped whenever the construction or its defaults change what the planted model computes (it is
# part of the model identity in the dense-arm cache key, next to the code hash).
PLANTED_VERSION = 1
# Largest offset along a peaked axis at which the peak's margin is guaranteed.
MAX_OFFSET = 19
# Latent frames over which the temporal heads' causal profile keeps its margin.
MAX_PLANTED_FRAMES = 9
# Energy shares of a peaked axis's three fastest pairs.
_PEAK_SHARES = (0.7, 0.15, 0.15)
# The causal time profile as (cos, sin) weights of the three fastest time pairs.
_CAUSAL_TIME = ((0.06, -0.18), (0.0, -0.30), (0.0, -0.47))


@dataclass(frozen=True)
class PlantedHeads:
    """Settings of the planted construction (see the module docstring).

    Attributes:
        sharpness: logit margin in nats of a head's peak over any other offset along a peaked
            axis, and of a temporal head's own frame over any later frame.
        qk_weight_scale: factor on the random q/k projection weights (their content-dependent part).
        spatial_value_gain: factor on a spatial head's columns of the random ``to_v`` weights.
        temporal_value_gain: factor on a temporal head's columns of ``to_v``.
        gate_bias: added to the self-attention residual gate of every channel.
        output_gain: factor on the random ``proj_out`` weights (the velocity's size).
        row_falloff: a spatial head's preference for nearby rows, in nats (the amplitude of its
            height term; see the module docstring).
    """

    sharpness: float = 24.0
    qk_weight_scale: float = 0.02
    spatial_value_gain: float = 4.5
    temporal_value_gain: float = 2.0
    gate_bias: float = 3.0
    output_gain: float = 2.0
    row_falloff: float = 2.5


def planted_layout(num_layers: int, num_heads: int) -> tuple[tuple[str, ...], ...]:
    """The kind of every head: block l, head h is "spatial" when h + l is even, else "temporal".

    Returns:
        ``num_layers`` tuples of ``num_heads`` names from ``HEAD_KINDS``.
    """
    return tuple(
        tuple(HEAD_KINDS[(h + layer) % 2] for h in range(num_heads)) for layer in range(num_layers)
    )


def peak_drop(frequencies: np.ndarray, max_offset: int = MAX_OFFSET) -> float:
    """Smallest score drop from offset 0 to offsets 1..max_offset of a unit-energy peak.

    Args:
        frequencies: the axis's pair frequencies (``models.rope.axis_frequencies``).
        max_offset: the largest offset checked.

    Returns:
        ``min_d sum_i share_i (1 - cos(theta_i d))`` over the three fastest pairs.
    """
    offsets = np.arange(1, max_offset + 1)
    theta = frequencies[: len(_PEAK_SHARES), None]
    drops = np.sum(np.asarray(_PEAK_SHARES)[:, None] * (1 - np.cos(theta * offsets)), axis=0)
    return float(drops.min())


def causal_profile(frequencies: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The temporal heads' time profile f(d), per unit of pair amplitude, at frame offsets d.

    Args:
        frequencies: the time axis's pair frequencies.
        offsets: key frame minus query frame, any shape.

    Returns:
        float64 of ``offsets``' shape, divided by the sum of the pairs' amplitudes.
    """
    d = np.asarray(offsets, np.float64)
    total = sum(
        c * np.cos(theta * d) + s * np.sin(theta * d)
        for (c, s), theta in zip(_CAUSAL_TIME, frequencies, strict=False)
    )
    return total / sum(np.hypot(c, s) for c, s in _CAUSAL_TIME)


def causal_drop(frequencies: np.ndarray, frames: int = MAX_PLANTED_FRAMES) -> float:
    """Smallest drop of ``causal_profile`` from offset 0 to any later frame (1..frames-1)."""
    later = causal_profile(frequencies, np.arange(1, frames))
    return float(causal_profile(frequencies, np.zeros(())) - later.max())


def head_vectors(
    kind: str, head_dim: int, sharpness: float, row_falloff: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The constant query and key vectors of one planted head (before RoPE).

    Args:
        kind: "spatial" (peaks on time and width) or "temporal" (peaks on height and width, and
            the causal time profile).
        head_dim: channels per head D (RoPE splits it as ``models.rope.rope_axis_dims``).
        sharpness: logit margin in nats (``PlantedHeads.sharpness``).
        row_falloff: a spatial head's amplitude A, in nats, of ``A cos(theta d)`` on the slowest of
            the height axis's three fastest pairs (``PlantedHeads.row_falloff``).

    Returns:
        ``(q, k)``, each float64 [D]. Pair (2i, 2i+1) of ``k`` is (r, 0) and of ``q`` is
        r (cos a, sin a); a is 0 except in a temporal head's time pairs.
    """
    if kind not in HEAD_KINDS:
        raise ValueError(f"kind={kind!r}; use one of {HEAD_KINDS}")
    dims = rope_axis_dims(head_dim)
    if min(dims) < 2 * len(_PEAK_SHARES):
        raise ValueError(f"head_dim={head_dim}: each RoPE axis needs {len(_PEAK_SHARES)} pairs")
    starts = (0, dims[0], dims[0] + dims[1])  # first channel of the time, height, width parts
    frequencies = [axis_frequencies(d) for d in dims]
    nats = sharpness * np.sqrt(head_dim)  # score = q . k / sqrt(D)
    q, k = np.zeros(head_dim), np.zeros(head_dim)
    peaked = {"spatial": (0, 2), "temporal": (1, 2)}[kind]
    for axis in peaked:
        energy = nats / peak_drop(frequencies[axis])
        for pair, share in enumerate(_PEAK_SHARES):
            q[starts[axis] + 2 * pair] = k[starts[axis] + 2 * pair] = np.sqrt(share * energy)
    if kind == "spatial" and row_falloff > 0:
        channel = starts[1] + 2 * (len(_PEAK_SHARES) - 1)
        q[channel] = k[channel] = np.sqrt(row_falloff * np.sqrt(head_dim))
    if kind == "temporal":
        scale = nats / causal_drop(frequencies[0])
        total = sum(np.hypot(c, s) for c, s in _CAUSAL_TIME)
        for pair, (c, s) in enumerate(_CAUSAL_TIME):
            r = np.sqrt(np.hypot(c, s) / total * scale)
            angle = np.arctan2(s, c)
            k[2 * pair] = r
            q[2 * pair], q[2 * pair + 1] = r * np.cos(angle), r * np.sin(angle)
    return q, k


def plant_heads(
    model: WanTransformer,
    settings: PlantedHeads = PlantedHeads(),
    layout: tuple[tuple[str, ...], ...] | None = None,
) -> tuple[tuple[str, ...], ...]:
    """Rewrites every block's self-attention in place into planted spatial / temporal heads.

    Args:
        model: a freshly initialised ``WanTransformer`` (its random weights are rescaled, not
            replaced, so the result is still a function of its seed).
        settings: the construction's strengths.
        layout: the kind of each (block, head); default ``planted_layout``.

    Returns:
        The layout that was planted.

    Raises:
        ValueError: a layout of the wrong shape or with an unknown kind.
    """
    cfg = model.config
    heads, head_dim = cfg.num_attention_heads, cfg.attention_head_dim
    layout = layout or planted_layout(cfg.num_layers, heads)
    if len(layout) != cfg.num_layers or any(len(kinds) != heads for kinds in layout):
        raise ValueError(f"layout must give {heads} kinds for each of {cfg.num_layers} blocks")
    for block, kinds in zip(model.blocks, layout, strict=True):
        vectors = [
            head_vectors(kind, head_dim, settings.sharpness, settings.row_falloff) for kind in kinds
        ]
        attn = block.attn1
        for side, proj, norm in ((0, attn.to_q, attn.norm_q), (1, attn.to_k, attn.norm_k)):
            c = np.concatenate([pair[side] for pair in vectors])  # [heads * D]
            rms = float(np.sqrt(np.mean(c**2)))
            proj.kernel[...] = proj.kernel[...] * settings.qk_weight_scale
            # RMSNorm of the bias alone gives c / rms; its weight scales that back to c.
            proj.bias[...] = jnp.asarray(c / rms, proj.bias.dtype)
            norm.scale[...] = jnp.full_like(norm.scale[...], rms)
        gains = {"spatial": settings.spatial_value_gain, "temporal": settings.temporal_value_gain}
        columns = np.repeat([gains[kind] for kind in kinds], head_dim)  # [heads * D]
        kernel = attn.to_v.kernel[...]
        attn.to_v.kernel[...] = kernel * jnp.asarray(columns, kernel.dtype)
        table = block.scale_shift_table[...]
        block.scale_shift_table[...] = table.at[:, 2, :].add(settings.gate_bias)
    model.proj_out.kernel[...] = model.proj_out.kernel[...] * settings.output_gain
    return layout
