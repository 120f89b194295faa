"""Numerical parity with diffusers' WanTransformer3DModel through the safetensors loader."""

import copy

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel

from models.loading import load_transformer
from tests.helpers.numerics import assert_allclose
from tests.helpers.references import TEXT_DIM, make_reference_transformer

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module", params=["d32", "d64"])
def pair(request, tmp_path_factory):
    reference = make_reference_transformer(request.param)
    folder = tmp_path_factory.mktemp(request.param)
    reference.save_pretrained(folder)
    return request.param, reference, folder, load_transformer(folder)


@pytest.mark.parametrize(
    ("latent_shape", "cfg_batch"),
    [
        ((2, 16, 3, 4, 6), True),  # F > 1, Hp != Wp, CFG-like batch: same latents, two contexts
        # Hp > Wp, and one latent frame: each a PyTorch and a JAX forward of their own.
        pytest.param((1, 16, 2, 6, 4), False, marks=pytest.mark.slow),
        pytest.param((2, 16, 1, 8, 8), False, marks=pytest.mark.slow),
    ],
)
def test_float32_parity(pair, latent_shape, cfg_batch):
    _, reference, _, model = pair
    gen = torch.Generator().manual_seed(1)
    latents = torch.randn(latent_shape, generator=gen)
    batch = latent_shape[0]
    if cfg_batch:
        latents = latents[:1].expand(batch, -1, -1, -1, -1).contiguous()
        timestep = torch.full((batch,), 757.0)
    else:
        timestep = torch.rand(batch, generator=gen) * 1000
    context = torch.randn(batch, 7, TEXT_DIM, generator=gen)
    out, expected = _run_both(reference, model, latents, timestep, context)
    assert_allclose(out, expected, atol=1e-4)
    if cfg_batch:  # the two contexts must lead to different predictions
        assert np.abs(expected[0] - expected[1]).max() > 1e-2


def _run_both(reference, model, latents, timestep, context):
    with torch.no_grad():
        expected = reference(latents, timestep, context, return_dict=False)[0].numpy()
    out = model(*(jnp.asarray(t.numpy()) for t in (latents, timestep, context)))
    return out, expected


@pytest.mark.slow  # a reference model of its own, saved and loaded: about 4 s on 2 cores
def test_float32_parity_without_cross_attn_norm(tmp_path):
    reference = make_reference_transformer("d32_no_cross_norm", seed=4)
    reference.save_pretrained(tmp_path)
    model = load_transformer(tmp_path)
    assert model.blocks[0].norm2 is None
    gen = torch.Generator().manual_seed(5)
    latents = torch.randn(2, 16, 2, 4, 6, generator=gen)
    timestep = torch.tensor([10.0, 600.0])
    context = torch.randn(2, 7, TEXT_DIM, generator=gen)
    out, expected = _run_both(reference, model, latents, timestep, context)
    assert_allclose(out, expected, atol=1e-4)


def test_bfloat16_error_comparable_to_reference_bfloat16(tmp_path):
    reference = make_reference_transformer("d64", seed=3)
    reference.save_pretrained(tmp_path)
    folder = tmp_path
    ref16 = copy.deepcopy(reference).to(torch.bfloat16)
    # As diffusers' from_pretrained(torch_dtype=bfloat16) does, keep the modules it lists in
    # _keep_in_fp32_modules (time embedder, norms, scale-shift tables) in float32.
    keep = set(WanTransformer3DModel._keep_in_fp32_modules)
    for name, param in ref16.named_parameters():
        if keep & set(name.split(".")):
            param.data = param.data.float()
    gen = torch.Generator().manual_seed(2)
    latents = torch.randn(2, 16, 3, 4, 6, generator=gen)
    timestep = torch.tensor([999.0, 321.0])
    context = torch.randn(2, 7, TEXT_DIM, generator=gen)
    with torch.no_grad():
        exact = reference(latents, timestep, context, return_dict=False)[0].numpy()
        torch16 = (
            ref16(latents.bfloat16(), timestep, context.bfloat16(), return_dict=False)[0]
            .float()
            .numpy()
        )
    model16 = load_transformer(folder, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    ours = model16(*(jnp.asarray(t.numpy()) for t in (latents, timestep, context)))
    assert ours.dtype == jnp.bfloat16
    ours = np.asarray(ours.astype(jnp.float32))
    torch_err = np.linalg.norm(torch16 - exact) / np.linalg.norm(exact)
    our_err = np.linalg.norm(ours - exact) / np.linalg.norm(exact)
    assert our_err < 2 * torch_err + 5e-3, (our_err, torch_err)
