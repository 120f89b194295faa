"""Architecture configuration of the Wan 2.1 text-to-video transformer.

One frozen dataclass, named presets, a reader for diffusers' ``config.json`` and a field-by-field
comparison so a checkpoint that disagrees with the preset a user asked for fails loudly.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

# The only query/key normalisation Wan 2.1 uses: one RMSNorm over all heads' channels at once.
_QK_NORM = "rms_norm_across_heads"

# diffusers keys that select image-conditioned (I2V) variants; this port is text-to-video only.
_I2V_KEYS = ("image_dim", "added_kv_proj_dim", "pos_embed_seq_len")

# diffusers keys that carry no architecture (bookkeeping written by save_pretrained).
_IGNORED_JSON_KEYS = ("_class_name", "_diffusers_version", "_name_or_path")


@dataclasses.dataclass(frozen=True)
class WanTransformerConfig:
    """Hyper-parameters of ``WanTransformer`` (diffusers' ``WanTransformer3DModel``, T2V).

    Attributes:
        patch_size: (t, h, w) patch of the patch-embedding Conv3d.
        num_attention_heads: heads in self- and cross-attention.
        attention_head_dim: channels per head; model width is heads * head_dim.
        in_channels: latent channels in.
        out_channels: latent channels out.
        text_dim: width of the text-encoder embeddings (context).
        freq_dim: width of the sinusoidal timestep embedding.
        ffn_dim: hidden width of the feed-forward network.
        num_layers: number of transformer blocks.
        cross_attn_norm: affine LayerNorm before cross-attention (identity when False).
        qk_norm: query/key normalisation; only "rms_norm_across_heads" is supported.
        eps: epsilon of every LayerNorm/RMSNorm.
        rope_max_seq_len: positions per axis the rotary tables cover.
        text_len: number of text tokens the model is used with (not part of the checkpoint).
    """

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str = _QK_NORM
    eps: float = 1e-6
    rope_max_seq_len: int = 1024
    text_len: int = 512

    def __post_init__(self) -> None:
        wrong = [_type_problem(f.name, f.type, getattr(self, f.name)) for f in _FIELDS]
        if any(wrong):
            raise ValueError("; ".join(w for w in wrong if w))
        object.__setattr__(self, "patch_size", tuple(int(p) for p in self.patch_size))
        if len(self.patch_size) != 3 or min(self.patch_size) < 1:
            raise ValueError(
                f"patch_size={self.patch_size!r}: need three positive ints (t, h, w), e.g. (1, 2, 2)"
            )
        if self.qk_norm != _QK_NORM:
            raise ValueError(f"qk_norm={self.qk_norm!r} is not supported; use {_QK_NORM!r}")
        if self.attention_head_dim < 6 or self.attention_head_dim % 2:
            # RoPE splits the head into three axes of even width each.
            raise ValueError(
                f"attention_head_dim={self.attention_head_dim}: need an even value >= 6 "
                "(3D RoPE splits it into three even parts), e.g. 64 or 128"
            )
        for name in (
            "num_attention_heads",
            "in_channels",
            "out_channels",
            "text_dim",
            "ffn_dim",
            "num_layers",
            "rope_max_seq_len",
            "text_len",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be a positive int")
        if self.freq_dim < 2 or self.freq_dim % 2:
            raise ValueError(f"freq_dim={self.freq_dim}: need an even value >= 2, e.g. 256")
        if not self.eps > 0:
            raise ValueError(f"eps={self.eps}: must be > 0, e.g. 1e-6")

    @property
    def dim(self) -> int:
        """Model width (inner dim): heads * head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @classmethod
    def from_diffusers_json(
        cls, config: Mapping[str, Any], *, text_len: int = 512
    ) -> WanTransformerConfig:
        """Builds a config from the dict in a diffusers ``transformer/config.json``.

        Args:
            config: the parsed JSON object of ``WanTransformer3DModel``.
            text_len: text tokens used with the model (the JSON does not record it).

        Returns:
            The matching ``WanTransformerConfig``.

        Raises:
            ValueError: for another model class, an image-conditioned (I2V) variant or keys this
                port does not know.
        """
        class_name = config.get("_class_name", "WanTransformer3DModel")
        if class_name != "WanTransformer3DModel":
            raise ValueError(
                f"config.json describes {class_name!r}; expected 'WanTransformer3DModel'"
            )
        i2v = {k: config[k] for k in _I2V_KEYS if config.get(k) is not None}
        if i2v:
            raise ValueError(
                f"config.json sets image-conditioning fields {i2v}; only text-to-video Wan 2.1 "
                "(these fields null) is supported"
            )
        known = {f.name for f in dataclasses.fields(cls)} - {"text_len"}
        # Unknown keys with a null value are defaults of newer diffusers versions and harmless;
        # unknown keys with a value could change the architecture, so they are refused.
        unknown = sorted(
            k
            for k, v in config.items()
            if k not in known
            and k not in _I2V_KEYS
            and k not in _IGNORED_JSON_KEYS
            and v is not None
        )
        if unknown:
            raise ValueError(
                f"config.json has keys this port does not understand: {unknown}; known keys: "
                f"{sorted(known)}"
            )
        kwargs = {k: config[k] for k in known if k in config}
        if "patch_size" in kwargs:
            kwargs["patch_size"] = tuple(kwargs["patch_size"])
        return cls(**kwargs, text_len=text_len)


_FIELDS = dataclasses.fields(WanTransformerConfig)


def _type_problem(name: str, annotation: str, value: Any) -> str | None:
    """What is wrong with the type of one field's value (``"num_attention_heads": "four"`` in a
    config.json), or None; checked before any comparison, which would fail with a TypeError."""
    integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    expected = {
        "int": ("an integer", integer),
        "float": ("a number", isinstance(value, numbers.Real) and not isinstance(value, bool)),
        "bool": ("true or false", isinstance(value, bool)),
        "str": ("a string", isinstance(value, str)),
    }
    what, fits = expected.get(annotation, ("three integers", _three_integers(value)))
    if fits:
        return None
    return f"{name}={value!r} has type {type(value).__name__}; it must be {what}"


def _three_integers(value: Any) -> bool:
    """Whether ``value`` is a list or tuple of three integers (``patch_size``)."""
    return (
        isinstance(value, list | tuple)
        and len(value) == 3
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
    )


# Fields that a diffusers config.json determines (text_len is a usage choice, not architecture).
ARCHITECTURE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(WanTransformerConfig) if f.name != "text_len"
)


# The architecture of the tiny CPU models: the two seeded ones, and (with four blocks) the one
# trained on shapes, which needs the depth to draw a prompt's direction (docs/models.md).
_TINY = WanTransformerConfig(
    num_attention_heads=4,
    attention_head_dim=64,
    ffn_dim=512,
    num_layers=2,
    text_dim=64,
    text_len=128,  # the byte tokenizer spends one token per character of the prompt
)

_PRESETS: dict[str, WanTransformerConfig] = {
    "wan2.1-t2v-1.3b": WanTransformerConfig(
        num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30
    ),
    "wan2.1-t2v-14b": WanTransformerConfig(
        num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40
    ),
    # The default: trained here on moving shapes (python -m models.training), its weights
    # shipped in the package (models.shipped_weights); model.checkpoint=DIR/checkpoint reads a
    # folder that command exported instead.
    "tiny": dataclasses.replace(_TINY, num_layers=4),
    # Seeded weights with planted spatial and temporal attention heads (models.planted_heads):
    # a construction whose sparse arm visibly breaks when attention goes to the wrong keys.
    "tiny-planted": _TINY,
    # The same architecture with plain seeded random weights (diffuse attention).
    "tiny-random": _TINY,
}

# Presets of the tiny architecture: the tiny UMT5 and VAE, whole-clip VAE decode, weights
# replicated on a mesh, float32 on a CPU or TPU.
TINY_PRESETS: tuple[str, ...] = ("tiny", "tiny-planted", "tiny-random")

# Presets whose weights are built from ``model.seed`` instead of read from a checkpoint.
SEEDED_PRESETS: tuple[str, ...] = ("tiny-planted", "tiny-random")


def transformer_config_names() -> tuple[str, ...]:
    """Names accepted by ``get_transformer_config``."""
    return tuple(_PRESETS)


def get_transformer_config(name: str) -> WanTransformerConfig:
    """Returns the preset config called ``name``.

    Args:
        name: one of ``transformer_config_names()``: "wan2.1-t2v-1.3b", "wan2.1-t2v-14b",
            "tiny", "tiny-planted" or "tiny-random" (one architecture, four blocks instead of
            two for the trained one; their weights differ: trained on moving shapes, planted,
            random).

    Raises:
        ValueError: for an unknown name (the message lists the known ones).
    """
    try:
        return _PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown transformer config {name!r}; known: {', '.join(_PRESETS)}"
        ) from None


def config_differences(
    a: WanTransformerConfig,
    b: WanTransformerConfig,
    fields: tuple[str, ...] | None = None,
) -> list[tuple[str, Any, Any]]:
    """Lists the fields whose values differ between two configs.

    Args:
        a: first config.
        b: second config.
        fields: field names to compare; all fields when None.

    Returns:
        ``[(field, value_in_a, value_in_b), ...]`` in declaration order; empty when equal.
    """
    names = fields if fields is not None else tuple(f.name for f in dataclasses.fields(a))
    return [(n, getattr(a, n), getattr(b, n)) for n in names if getattr(a, n) != getattr(b, n)]
