"""Loading diffusers-format safetensors folders: layouts, shards, and every refusal."""

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel
from flax import nnx
from safetensors.torch import load_file, save_file

from models.config import WanTransformerConfig
from models.loading import INDEX_NAME, WEIGHTS_NAME, diffusers_key_map, load_transformer

ARCH = {
    "num_attention_heads": 2,
    "attention_head_dim": 32,
    "text_dim": 24,
    "ffn_dim": 96,
    "num_layers": 2,
    "rope_max_seq_len": 64,
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(torch model, folder with config.json + one safetensors file)."""
    torch.manual_seed(0)
    model = WanTransformer3DModel(**ARCH).eval()
    folder = tmp_path_factory.mktemp("wan_single")
    model.save_pretrained(folder)
    return model, folder


@pytest.fixture
def folder_copy(saved, tmp_path):
    dst = tmp_path / "transformer"
    shutil.copytree(saved[1], dst)
    return dst


def _rewrite(folder, edit):
    tensors = load_file(folder / WEIGHTS_NAME)
    edit(tensors)
    save_file(tensors, folder / WEIGHTS_NAME)


def _flat(model):
    return {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model))}


@pytest.mark.parametrize("cross_attn_norm", [True, False])
def test_key_map_covers_diffusers_state_dict(cross_attn_norm):
    torch_keys = set(WanTransformer3DModel(**ARCH, cross_attn_norm=cross_attn_norm).state_dict())
    cfg = WanTransformerConfig(**ARCH, cross_attn_norm=cross_attn_norm)
    assert set(diffusers_key_map(cfg)) == torch_keys
    assert len(torch_keys) == (69 if cross_attn_norm else 65)


def test_values_land_in_the_right_layout(saved):
    torch_model, folder = saved
    model = load_transformer(folder)
    sd = {k: v.detach().numpy() for k, v in torch_model.state_dict().items()}
    flat = _flat(model)
    # Conv3d [out, in, t, h, w] → [in, t, h, w, out]; Linear [out, in] → [in, out].
    np.testing.assert_array_equal(
        flat[("patch_embedding", "kernel")], sd["patch_embedding.weight"].transpose(1, 2, 3, 4, 0)
    )
    np.testing.assert_array_equal(
        flat[("blocks", 1, "ffn", "proj_in", "kernel")], sd["blocks.1.ffn.net.0.proj.weight"].T
    )
    np.testing.assert_array_equal(
        flat[("blocks", 0, "attn2", "norm_k", "scale")], sd["blocks.0.attn2.norm_k.weight"]
    )
    for key, (path, _) in diffusers_key_map(model.config).items():
        assert flat[path].size == sd[key].size, key
        assert flat[path].dtype == np.float32


def test_bfloat16_params_keep_float32_islands(saved):
    model = load_transformer(saved[1], param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    flat = {p: v[...].dtype for p, v in nnx.to_flat_state(nnx.state(model))}
    assert flat[("blocks", 0, "attn1", "to_q", "kernel")] == jnp.bfloat16
    assert flat[("patch_embedding", "kernel")] == jnp.bfloat16
    assert flat[("blocks", 0, "scale_shift_table")] == jnp.float32
    assert flat[("blocks", 0, "norm2", "scale")] == jnp.float32
    assert flat[("condition_embedder", "time_linear_2", "kernel")] == jnp.float32


def test_sharded_index_loads_like_single_file(saved, tmp_path):
    torch_model, folder = saved
    torch_model.save_pretrained(tmp_path, max_shard_size="60KB")
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (tmp_path / INDEX_NAME).is_file() and len(shards) > 2, shards
    single, sharded = _flat(load_transformer(folder)), _flat(load_transformer(tmp_path))
    assert single.keys() == sharded.keys()
    for path in single:
        np.testing.assert_array_equal(single[path], sharded[path])


def test_index_naming_absent_shard(saved, tmp_path):
    saved[0].save_pretrained(tmp_path, max_shard_size="60KB")
    victim = sorted(tmp_path.glob("*.safetensors"))[0]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        load_transformer(tmp_path)


def test_missing_folder_and_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_transformer(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_transformer(tmp_path)


def test_no_weights(folder_copy):
    (folder_copy / WEIGHTS_NAME).unlink()
    with pytest.raises(FileNotFoundError, match="neither"):
        load_transformer(folder_copy)


def test_pickle_weights_refused(saved, tmp_path):
    saved[0].save_pretrained(tmp_path, safe_serialization=False)
    assert not list(tmp_path.glob("*.safetensors"))
    with pytest.raises(ValueError, match="pickle weights.*diffusion_pytorch_model.bin"):
        load_transformer(tmp_path)
    with pytest.raises(ValueError, match="pickle checkpoints"):
        load_transformer(tmp_path / "diffusion_pytorch_model.bin")


def test_missing_and_unexpected_keys_listed(folder_copy):
    def edit(t):
        del t["blocks.1.attn2.norm_q.weight"]
        t["blocks.1.attn2.extra.weight"] = torch.zeros(3)

    _rewrite(folder_copy, edit)
    with pytest.raises(ValueError) as err:
        load_transformer(folder_copy)
    msg = str(err.value)
    assert "missing keys 1: [blocks.1.attn2.norm_q.weight]" in msg
    assert "unexpected keys 1: [blocks.1.attn2.extra.weight]" in msg


def test_shape_mismatch_names_key_and_shapes(folder_copy):
    _rewrite(folder_copy, lambda t: t.__setitem__("proj_out.weight", torch.zeros(64, 63)))
    with pytest.raises(ValueError, match=r"proj_out.weight: expected \(64, 64\), found \(64, 63\)"):
        load_transformer(folder_copy)


def test_unsupported_dtype(folder_copy):
    _rewrite(
        folder_copy,
        lambda t: t.__setitem__("proj_out.bias", torch.zeros(64, dtype=torch.int32)),
    )
    with pytest.raises(ValueError, match="unsupported dtype I32 for proj_out.bias"):
        load_transformer(folder_copy)


def test_half_precision_file_is_cast(folder_copy, saved):
    _rewrite(folder_copy, lambda t: t.update({k: v.half() for k, v in t.items()}))
    flat = _flat(load_transformer(folder_copy))
    expected = saved[0].state_dict()["proj_out.bias"].half().float().numpy()
    assert flat[("proj_out", "bias")].dtype == np.float32
    np.testing.assert_array_equal(flat[("proj_out", "bias")], expected)


def test_config_mismatch_lists_fields(saved):
    folder = saved[1]
    wanted = WanTransformerConfig(**{**ARCH, "num_layers": 3, "ffn_dim": 128})
    with pytest.raises(ValueError, match="ffn_dim: requested 128, config.json 96.*num_layers"):
        load_transformer(folder, config=wanted)
    with pytest.raises(ValueError, match="num_attention_heads: requested 4, config.json 2"):
        load_transformer(folder, config="tiny-planted")
    with pytest.warns(UserWarning, match="num_layers: requested 3, config.json 2"):
        model = load_transformer(folder, config=wanted, on_config_mismatch="warn")
    assert model.config.num_layers == 2 and len(model.blocks) == 2
    same = WanTransformerConfig(**ARCH, text_len=16)
    assert load_transformer(folder, config=same).config == same


def test_unsupported_config_json(folder_copy):
    cfg = json.loads((folder_copy / "config.json").read_text())
    cfg["image_dim"] = 1280
    (folder_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="image-conditioning"):
        load_transformer(folder_copy)
