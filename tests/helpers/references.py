"""The small random PyTorch reference models the parity tests compare against.

One place for the configurations, so the float32 and bfloat16 parity tests check the same models.
torch, diffusers and transformers are imported inside the builders: a module importing this one
still loads where they are absent (its parity tests then skip).
"""

from __future__ import annotations

from models.tiny_components import TINY_VAE_CONFIG
from models.tokenizer import ByteTokenizer

# WanTransformer3DModel variants (head size 32 and 64; without the cross-attention norm).
TRANSFORMER_MODELS = {
    "d32": {"num_attention_heads": 2, "attention_head_dim": 32},
    "d64": {"num_attention_heads": 2, "attention_head_dim": 64},
    "d32_no_cross_norm": {
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "cross_attn_norm": False,
    },
}
TEXT_DIM = 24
ENCODER_PROMPTS = ["A cat walks on grass.", "Waves crash on the rocks at sunset, slow motion, 4k"]


def make_reference_transformer(kind: str, seed: int = 0):
    """A random tiny diffusers ``WanTransformer3DModel`` (2 layers, text_dim 24, ffn 96).

    Norm weights are perturbed away from 1/0, so a mis-mapped or ignored norm parameter shows.

    Args:
        kind: a key of ``TRANSFORMER_MODELS``.
        seed: torch seed.
    """
    import torch
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    model = WanTransformer3DModel(
        **TRANSFORMER_MODELS[kind], text_dim=TEXT_DIM, ffn_dim=96, num_layers=2, rope_max_seq_len=64
    ).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.2 * torch.randn_like(param))
    return model


def make_reference_encoder(seed: int = 0):
    """A random tiny transformers ``UMT5EncoderModel`` (d_model 32, 2 layers, 4 heads, 8 buckets)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.UMT5Config(
        vocab_size=ByteTokenizer.VOCAB_SIZE,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        dropout_rate=0.0,
    )
    return transformers.UMT5EncoderModel(config).eval()


def make_reference_vae(seed: int = 0):
    """A random diffusers ``AutoencoderKLWan`` with the tiny preset's config.

    Every parameter is perturbed (zero-initialised biases would leave parts of the port untested).
    """
    import diffusers
    import torch

    c = TINY_VAE_CONFIG
    torch.manual_seed(seed)
    model = diffusers.AutoencoderKLWan(
        base_dim=c.base_dim,
        z_dim=c.z_dim,
        dim_mult=list(c.dim_mult),
        num_res_blocks=c.num_res_blocks,
        temperal_downsample=list(c.temperal_downsample),
        latents_mean=list(c.latents_mean),
        latents_std=list(c.latents_std),
    ).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return model
