"""A mini Wan VAE and a tile grid for the decode tests: one x2 upsampling level and 4 channels
keep every compile around a second or two; its mid-block attention still makes tiles differ
from the untiled decode, as the real VAE's does."""

from models.vae import WanVAEConfig
from models.vae_tiling import TilingConfig

MINI_VAE_CONFIG = WanVAEConfig(
    base_dim=4,
    z_dim=4,
    dim_mult=(1, 2),
    num_res_blocks=1,
    temperal_downsample=(True,),
    latents_mean=(0.1, -0.2, 0.3, 0.0),
    latents_std=(0.9, 1.1, 1.0, 1.2),
    scale_factor_spatial=2,
    scale_factor_temporal=2,
)
# 12 x 12-latent tiles every 8 latents (24-pixel tiles, 8-pixel overlaps at scale 2).
TILING = TilingConfig(24, 24, 16, 16)
# A 3 x 3 grid whose old tiles have four shapes: (12, 12), (12, 5), (6, 12), (6, 5).
LATENT_SHAPE = (2, 4, 1, 22, 21)  # one latent frame: half the decoder to compile
