"""bfloat16 parity with the PyTorch references (diffusers / transformers, torch CPU bfloat16).

Each model runs three ways on the float32 parity tests' small random configurations: the torch
reference in float32 (``exact``), the torch reference loaded in bfloat16 the way ``from_pretrained
(torch_dtype=torch.bfloat16)`` loads it (``torch16``), and ours loaded with bfloat16 parameters and
compute (``ours16``). Two bfloat16 programs cannot agree bit for bit (they round in a different
order), so the check is on the error each makes against ``exact``, as a relative L2 norm
``e(x) = ||x - exact|| / ||exact||``:

    e(ours16) <= 1.5 · e(torch16) + u / 2,      u = 2⁻⁸ (bfloat16's unit roundoff)

Why this bound: both errors are sums of the same kind of rounding (each op rounds at u relative),
so with the same float32 islands they are of the same size; measured ratios are 0.9-1.2. The slack
1.5 absorbs rounding-order noise, and u/2 (rounding the output once) keeps near-exact outputs from
failing on noise. A missing island multiplies the error instead: computing the timestep sinusoid in
bfloat16 gives 12x (tested below). Measured ``e`` (ours / torch): transformer 0.0060 / 0.0054,
UMT5 0.0068 / 0.0067 (0.077 / 0.085 with 16x larger attention logits), VAE decode 0.022 / 0.024.

Islands are also checked structurally: no reduction or transcendental op of the bfloat16 programs
takes a bfloat16 operand (norm statistics, softmax, RoPE, timestep sinusoid, GELU/SiLU all run in
float32), and the parameters kept in float32 are exactly the reference's.
"""

from __future__ import annotations

import collections
import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.extend import core as jax_core

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

import models.embeddings  # noqa: E402
from models.loading import diffusers_key_map, load_transformer  # noqa: E402
from models.text_encoder import load_umt5_encoder, run_encoder  # noqa: E402
from models.tiny_components import TINY_VAE_CONFIG  # noqa: E402
from models.tokenizer import ByteTokenizer, tokenize_batch  # noqa: E402
from models.vae import decode_latents, load_vae  # noqa: E402
from tests.helpers.references import (  # noqa: E402
    ENCODER_PROMPTS,
    TEXT_DIM,
    make_reference_encoder,
    make_reference_transformer,
    make_reference_vae,
)

pytestmark = pytest.mark.parity

BF16_UNIT_ROUNDOFF = 2.0**-8
ERROR_RATIO = 1.5
ERROR_FLOOR = BF16_UNIT_ROUNDOFF / 2
# Ops whose bfloat16 use would drop a float32 island of the reference: reductions (norm and
# softmax statistics) and transcendentals (softmax exp, RoPE/timestep sin/cos, GELU tanh, SiLU).
STATISTICS_PRIMITIVES = frozenset(
    {
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "cumsum",
        "exp",
        "exp2",
        "log",
        "log1p",
        "tanh",
        "logistic",
        "rsqrt",
        "sqrt",
        "sin",
        "cos",
        "erf",
        "pow",
        "integer_pow",
        "div",
    }
)


def relative_error(x: np.ndarray, exact: np.ndarray) -> float:
    """``||x - exact||₂ / ||exact||₂`` in float64."""
    x, exact = np.asarray(x, np.float64), np.asarray(exact, np.float64)
    return float(np.linalg.norm(x - exact) / np.linalg.norm(exact))


def assert_bf16_error_like_reference(ours16, torch16, exact, label: str = "") -> None:
    """The module docstring's bound: e(ours16) <= 1.5 e(torch16) + u/2."""
    ours_err, torch_err = relative_error(ours16, exact), relative_error(torch16, exact)
    bound = ERROR_RATIO * torch_err + ERROR_FLOOR
    assert ours_err <= bound, f"{label}: ours {ours_err:.5f} > {bound:.5f} (torch {torch_err:.5f})"


def as_loaded_in_bfloat16(model):
    """The model as diffusers' ``from_pretrained(torch_dtype=torch.bfloat16)`` leaves it.

    Parameters whose dotted name contains a module of ``_keep_in_fp32_modules`` stay float32, the
    rest become bfloat16, buffers (RoPE tables) keep their dtype: what
    ``load_model_dict_into_meta`` does (it needs ``accelerate``, which the test env lacks).
    """
    copied = copy.deepcopy(model)
    keep = set(type(model)._keep_in_fp32_modules or ())
    for name, param in copied.named_parameters():
        as_f32 = keep & set(name.split("."))
        param.data = param.data.float() if as_f32 else param.data.to(torch.bfloat16)
    return copied


def bfloat16_statistics(fn, *args) -> collections.Counter:
    """Counts the ``STATISTICS_PRIMITIVES`` equations of ``fn``'s jaxpr with a bfloat16 operand."""
    found: collections.Counter = collections.Counter()

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            dtypes = {getattr(getattr(v, "aval", None), "dtype", None) for v in eqn.invars}
            if eqn.primitive.name in STATISTICS_PRIMITIVES and jnp.dtype(jnp.bfloat16) in dtypes:
                found[eqn.primitive.name] += 1
            for param in eqn.params.values():
                for sub in param if isinstance(param, (list, tuple)) else (param,):
                    if isinstance(sub, jax_core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax_core.Jaxpr):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def _torch_param_dtypes(model) -> dict[str, str]:
    return {
        n: "float32" if p.dtype == torch.float32 else "bfloat16"
        for n, p in model.named_parameters()
    }


# --- transformer -----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["d32", "d64", "d32_no_cross_norm"])
def transformer_trio(request, tmp_path_factory):
    """(kind, torch float32, torch bfloat16 as loaded, ours bfloat16) on one random model."""
    reference = make_reference_transformer(request.param, seed=3)
    folder = tmp_path_factory.mktemp(f"bf16_{request.param}")
    reference.save_pretrained(folder)
    ours = load_transformer(folder, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    return request.param, reference, as_loaded_in_bfloat16(reference), ours


def _transformer_outputs(trio, latent_shape, timestep):
    _, reference, ref16, ours = trio
    gen = torch.Generator().manual_seed(2)
    latents = torch.randn(latent_shape, generator=gen)
    timestep = torch.as_tensor(timestep, dtype=torch.float32)
    context = torch.randn(latent_shape[0], 7, TEXT_DIM, generator=gen)
    with torch.no_grad():
        exact = reference(latents, timestep, context, return_dict=False)[0].numpy()
        torch16 = ref16(latents.bfloat16(), timestep, context.bfloat16(), return_dict=False)[0]
    out = ours(*(jnp.asarray(t.numpy()) for t in (latents, timestep, context)))
    assert out.dtype == jnp.bfloat16
    return np.asarray(out.astype(jnp.float32)), torch16.float().numpy(), exact


@pytest.mark.parametrize(
    ("latent_shape", "timestep"),
    [
        ((2, 16, 3, 4, 6), [999.0, 321.0]),  # F > 1, Hp != Wp, a timestep near 1000
        # More shapes under `-m slow`: the default suite keeps one per model variant.
        pytest.param((1, 16, 2, 6, 4), [57.0], marks=pytest.mark.slow),  # Hp > Wp
        pytest.param((2, 16, 1, 8, 8), [500.0, 5.0], marks=pytest.mark.slow),  # one frame
    ],
)
def test_transformer_bfloat16_error_is_the_reference_s(transformer_trio, latent_shape, timestep):
    ours16, torch16, exact = _transformer_outputs(transformer_trio, latent_shape, timestep)
    assert_bf16_error_like_reference(ours16, torch16, exact, transformer_trio[0])


def test_transformer_keeps_the_reference_s_float32_parameters(transformer_trio):
    kind, _, ref16, ours = transformer_trio
    flat = dict(nnx.to_flat_state(nnx.state(ours, nnx.Param)))
    key_map = diffusers_key_map(ours.config)
    expected = _torch_param_dtypes(ref16)
    ours_dtypes = {name: jnp.dtype(flat[key_map[name][0]][...].dtype).name for name in expected}
    assert ours_dtypes == expected, kind
    assert "float32" in expected.values()  # the reference does keep islands here


def test_transformer_statistics_run_in_float32(transformer_trio):
    _, _, _, ours = transformer_trio
    args = (jnp.zeros((1, 16, 2, 4, 6)), jnp.full((1,), 500.0), jnp.zeros((1, 7, TEXT_DIM)))
    assert bfloat16_statistics(lambda *a: ours(*a), *args) == {}


@pytest.mark.parametrize("transformer_trio", ["d64"], indirect=True)
def test_a_missing_float32_island_breaks_the_bound(transformer_trio, monkeypatch):
    """The tolerance is tight enough to see a dropped island: the timestep sinusoid in bfloat16."""
    original = models.embeddings.timestep_embedding

    def in_bfloat16(timestep, dim, max_period=10000.0):
        half = dim // 2
        freqs = jnp.exp(-jnp.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
        angles = timestep.astype(jnp.bfloat16)[:, None] * freqs.astype(jnp.bfloat16)[None, :]
        return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1).astype(jnp.float32)

    monkeypatch.setattr(models.embeddings, "timestep_embedding", in_bfloat16)
    ours16, torch16, exact = _transformer_outputs(
        transformer_trio, (2, 16, 3, 4, 6), [999.0, 321.0]
    )
    with pytest.raises(AssertionError, match="ours"):
        assert_bf16_error_like_reference(ours16, torch16, exact)
    monkeypatch.setattr(models.embeddings, "timestep_embedding", original)


# --- UMT5 encoder ----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["random", "large_logits"])
def encoder_trio(request, tmp_path_factory):
    """(torch float32, torch bfloat16 via from_pretrained, ours bfloat16) UMT5 encoders.

    ``large_logits`` scales q and k by 4 (logits 16x, up to ~80): UMT5 does not scale its scores,
    and real checkpoints produce logits of tens, where float32 scores matter.
    """
    reference = make_reference_encoder()
    if request.param == "large_logits":
        with torch.no_grad():
            for name, param in reference.named_parameters():
                if name.endswith(("SelfAttention.q.weight", "SelfAttention.k.weight")):
                    param.mul_(4.0)
    folder = tmp_path_factory.mktemp(f"umt5_bf16_{request.param}")
    reference.save_pretrained(folder)
    ref16 = transformers.UMT5EncoderModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    return reference, ref16, load_umt5_encoder(folder, param_dtype=jnp.bfloat16)


def test_umt5_bfloat16_error_is_the_reference_s(encoder_trio):
    reference, ref16, ours = encoder_trio
    batch = tokenize_batch(ByteTokenizer(), ENCODER_PROMPTS, max_length=64)
    ids = torch.from_numpy(batch.input_ids).long()
    mask = torch.from_numpy(batch.attention_mask).long()
    with torch.no_grad():
        exact = reference(ids, mask).last_hidden_state.numpy()
        torch16 = ref16(ids, mask).last_hidden_state.float().numpy()
    out = run_encoder(ours, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))
    assert out.dtype == jnp.bfloat16
    assert_bf16_error_like_reference(np.asarray(out.astype(jnp.float32)), torch16, exact, "umt5")


def test_umt5_keeps_the_reference_s_parameter_dtypes(encoder_trio):
    _, ref16, ours = encoder_trio
    flat = {
        ".".join(map(str, path)): jnp.dtype(var[...].dtype).name
        for path, var in nnx.to_flat_state(nnx.state(ours, nnx.Param))
    }
    expected = _torch_param_dtypes(ref16)
    expected.pop("encoder.embed_tokens.weight", None)  # tied to shared.weight
    assert flat == expected


def test_umt5_statistics_run_in_float32(encoder_trio):
    ours = encoder_trio[2]
    ids = jnp.zeros((1, 16), jnp.int32)
    assert bfloat16_statistics(lambda i, m: ours(i, m), ids, jnp.ones_like(ids)) == {}


# --- VAE decoder -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vae_trio(tmp_path_factory):
    """(torch float32, torch bfloat16 via from_pretrained, ours bfloat16) decoders on the float32
    parity test's configuration (the tiny preset's, perturbed weights)."""
    reference = make_reference_vae()
    folder = tmp_path_factory.mktemp("vae_bf16")
    reference.save_pretrained(folder)
    ref16 = diffusers.AutoencoderKLWan.from_pretrained(folder, torch_dtype=torch.bfloat16).eval()
    return reference, ref16, load_vae(folder, param_dtype=jnp.bfloat16)


@pytest.mark.slow  # three VAE decodes, two in PyTorch: about 6 s on 2 cores
def test_vae_bfloat16_error_is_the_reference_s(vae_trio):
    reference, ref16, ours = vae_trio
    latents = np.random.default_rng(0).standard_normal((2, 16, 3, 4, 6)).astype(np.float32)
    std = torch.tensor(TINY_VAE_CONFIG.latents_std).view(1, -1, 1, 1, 1)
    mean = torch.tensor(TINY_VAE_CONFIG.latents_mean).view(1, -1, 1, 1, 1)
    # The un-normalisation in float32 for both, as ours does (then cast to the VAE's dtype).
    z = torch.from_numpy(latents) * std + mean
    with torch.no_grad():
        exact = reference.decode(z).sample.permute(0, 2, 3, 4, 1).numpy()
        torch16 = ref16.decode(z.bfloat16()).sample.float().permute(0, 2, 3, 4, 1).numpy()
    out = np.asarray(decode_latents(ours, jnp.asarray(latents)))
    assert np.abs(exact).mean() > 0.05
    assert_bf16_error_like_reference(out, torch16, exact, "vae")


def test_vae_keeps_the_reference_s_parameter_dtypes(vae_trio):
    _, ref16, ours = vae_trio
    flat = {
        ".".join(map(str, path)): jnp.dtype(var[...].dtype).name
        for path, var in nnx.to_flat_state(nnx.state(ours, nnx.Param))
    }
    expected = {
        name: dtype
        for name, dtype in _torch_param_dtypes(ref16).items()
        if not name.startswith(("encoder.", "quant_conv."))  # only the decoder is ported
    }
    assert flat == expected


def test_vae_statistics_run_in_float32(vae_trio):
    ours = vae_trio[2]
    z = jnp.zeros((1, 16, 2, 4, 6))  # [B, z_dim, F, h, w]
    assert bfloat16_statistics(lambda z: decode_latents(ours, z), z) == {}
