"""Load a diffusers-format Wan transformer folder (safetensors only) into ``WanTransformer``.

The folder's ``config.json`` decides the architecture. Loading first reads only the safetensors
headers and checks every key, shape and dtype, then builds the model abstractly (``nnx.eval_shape``,
no weights allocated) and fills it tensor by tensor, casting each as it is read, so peak host memory
stays near the model's own size. Nothing is returned until every parameter is in place.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from safetensors import safe_open

from models.config import (
    ARCHITECTURE_FIELDS,
    WanTransformerConfig,
    config_differences,
    get_transformer_config,
)
from models.safetensors_reader import WeightsError, read_json
from models.transformer import WanTransformer, abstract_transformer

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "diffusion_pytorch_model.safetensors"
INDEX_NAME = "diffusion_pytorch_model.safetensors.index.json"

# Pickle-based formats can run arbitrary code when opened; they are refused, never opened.
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
_SUPPORTED_DTYPES = ("F64", "F32", "F16", "BF16")
# diffusers itself ignores these unexpected keys for WanTransformer3DModel.
_IGNORED_KEY_FRAGMENTS = ("norm_added_q",)
_MAX_LISTED = 20

Path_ = tuple[str | int, ...]


def _linear(x: jax.Array) -> jax.Array:
    """PyTorch Linear weight [out, in] → NNX kernel [in, out]."""
    return x.T


def _conv3d(x: jax.Array) -> jax.Array:
    """PyTorch Conv3d weight [out, in, t, h, w] → PatchEmbed kernel [in, t, h, w, out]."""
    return jnp.transpose(x, (1, 2, 3, 4, 0))


def _identity(x: jax.Array) -> jax.Array:
    return x


# Inverse layouts, to state the shape expected in the file from the NNX parameter's shape.
_TORCH_SHAPE: dict[Callable, Callable[[tuple[int, ...]], tuple[int, ...]]] = {
    _linear: lambda s: (s[1], s[0]),
    _conv3d: lambda s: (s[4], s[0], s[1], s[2], s[3]),
    _identity: lambda s: tuple(s),
}


def diffusers_key_map(config: WanTransformerConfig) -> dict[str, tuple[Path_, Callable]]:
    """Every state-dict key of diffusers' ``WanTransformer3DModel`` → (NNX state path, transform).

    Args:
        config: the architecture.

    Returns:
        Mapping from PyTorch key (e.g. ``"blocks.0.attn1.to_q.weight"``) to the path of the NNX
        variable (e.g. ``("blocks", 0, "attn1", "to_q", "kernel")``) and the function that turns
        the PyTorch tensor into the NNX layout.
    """
    table: dict[str, tuple[Path_, Callable]] = {}

    def linear(torch_name: str, path: Path_) -> None:
        table[f"{torch_name}.weight"] = ((*path, "kernel"), _linear)
        table[f"{torch_name}.bias"] = ((*path, "bias"), _identity)

    table["patch_embedding.weight"] = (("patch_embedding", "kernel"), _conv3d)
    table["patch_embedding.bias"] = (("patch_embedding", "bias"), _identity)
    ce = "condition_embedder"
    linear(f"{ce}.time_embedder.linear_1", (ce, "time_linear_1"))
    linear(f"{ce}.time_embedder.linear_2", (ce, "time_linear_2"))
    linear(f"{ce}.time_proj", (ce, "time_proj"))
    linear(f"{ce}.text_embedder.linear_1", (ce, "text_linear_1"))
    linear(f"{ce}.text_embedder.linear_2", (ce, "text_linear_2"))
    for i in range(config.num_layers):
        pre = f"blocks.{i}"
        for attn in ("attn1", "attn2"):
            for proj in ("to_q", "to_k", "to_v"):
                linear(f"{pre}.{attn}.{proj}", ("blocks", i, attn, proj))
            linear(f"{pre}.{attn}.to_out.0", ("blocks", i, attn, "to_out"))
            for norm in ("norm_q", "norm_k"):
                table[f"{pre}.{attn}.{norm}.weight"] = (
                    ("blocks", i, attn, norm, "scale"),
                    _identity,
                )
        if config.cross_attn_norm:
            table[f"{pre}.norm2.weight"] = (("blocks", i, "norm2", "scale"), _identity)
            table[f"{pre}.norm2.bias"] = (("blocks", i, "norm2", "bias"), _identity)
        linear(f"{pre}.ffn.net.0.proj", ("blocks", i, "ffn", "proj_in"))
        linear(f"{pre}.ffn.net.2", ("blocks", i, "ffn", "proj_out"))
        table[f"{pre}.scale_shift_table"] = (("blocks", i, "scale_shift_table"), _identity)
    linear("proj_out", ("proj_out",))
    table["scale_shift_table"] = (("scale_shift_table",), _identity)
    return table


def stacked_path(path: Path_) -> tuple[Path_, int | None]:
    """A block parameter's path in the scanned model, and its layer in the stack.

    Args:
        path: the unrolled model's path, e.g. ``("blocks", 3, "ffn", "proj_in", "kernel")``.

    Returns:
        ``(("blocks", "ffn", "proj_in", "kernel"), 3)``; a path outside the blocks unchanged,
        with None.
    """
    if path[0] == "blocks":
        return (path[0], *path[2:]), int(path[1])
    return path, None


def _place(value: jax.Array, sharding: jax.sharding.Sharding | None) -> jax.Array:
    return value if sharding is None else jax.device_put(value, sharding)


def _layer_sharding(stacked: jax.sharding.Sharding | None) -> jax.sharding.Sharding | None:
    """One layer's placement within a stacked parameter's (its leading axis is never split)."""
    if isinstance(stacked, NamedSharding):
        return NamedSharding(stacked.mesh, PartitionSpec(*tuple(stacked.spec)[1:]))
    return stacked


def _stack(pieces: dict[int, jax.Array], sharding: jax.sharding.Sharding | None) -> jax.Array:
    """The layers of one parameter stacked in order, on the stacked parameter's devices."""
    ordered = [pieces[i] for i in range(len(pieces))]
    pieces.clear()  # drop the per-layer arrays as soon as the stack holds them
    return jax.jit(lambda *xs: jnp.stack(xs), out_shardings=sharding)(*ordered)


def _listing(keys: set[str] | list[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:_MAX_LISTED])
    more = f" ... and {len(keys) - _MAX_LISTED} more" if len(keys) > _MAX_LISTED else ""
    return f"{len(keys)}: [{shown}{more}]"


def _check_folder(folder: Path) -> None:
    if folder.is_file():
        if folder.suffix in _PICKLE_SUFFIXES:
            raise ValueError(
                f"{folder}: pickle checkpoints ({', '.join(_PICKLE_SUFFIXES)}) are not loaded "
                "(unsafe to open); convert to safetensors and pass the diffusers folder"
            )
        raise ValueError(
            f"{folder} is a file; pass the diffusers transformer folder holding {CONFIG_NAME} "
            f"and {WEIGHTS_NAME}"
        )
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
    if not (folder / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"{folder} has no {CONFIG_NAME}; pass a diffusers WanTransformer3DModel folder "
            "(e.g. Wan2.1-T2V-1.3B-Diffusers/transformer)"
        )


def read_diffusers_config(folder: str | Path, *, text_len: int = 512) -> WanTransformerConfig:
    """Reads ``config.json`` of a diffusers transformer folder.

    Args:
        folder: the folder (e.g. ``.../Wan2.1-T2V-14B-Diffusers/transformer``).
        text_len: text tokens the model will be used with (not recorded in the JSON).

    Raises:
        FileNotFoundError: no folder or no config.json.
        ValueError: a config this port does not support.
    """
    folder = Path(folder)
    _check_folder(folder)
    path = folder / CONFIG_NAME
    try:
        return WanTransformerConfig.from_diffusers_json(read_json(path), text_len=text_len)
    except WeightsError:
        raise
    except ValueError as err:  # a value of the wrong type or range: the file is named
        raise ValueError(f"{path}: {err}") from None


def _weight_files(folder: Path) -> dict[str, list[str]]:
    """Shard file name → keys the index assigns to it (empty list for a single file)."""
    index = folder / INDEX_NAME
    if index.is_file():
        with open(index) as f:
            weight_map: dict[str, str] = json.load(f)["weight_map"]
        shards: dict[str, list[str]] = {}
        for key, name in weight_map.items():
            shards.setdefault(name, []).append(key)
        missing = sorted(n for n in shards if not (folder / n).is_file())
        if missing:
            raise FileNotFoundError(
                f"{INDEX_NAME} in {folder} names shards that are absent: {missing}"
            )
        return shards
    if (folder / WEIGHTS_NAME).is_file():
        return {WEIGHTS_NAME: []}
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    if pickles:
        raise ValueError(
            f"{folder} holds only pickle weights {pickles}; they are not loaded (unsafe to open). "
            f"Save the model as safetensors ({WEIGHTS_NAME})"
        )
    raise FileNotFoundError(
        f"{folder} has neither {WEIGHTS_NAME} nor {INDEX_NAME}; found: "
        f"{sorted(p.name for p in folder.iterdir())}"
    )


def _resolve_config(
    folder: Path,
    config: str | WanTransformerConfig | None,
    on_config_mismatch: Literal["raise", "warn"],
) -> WanTransformerConfig:
    if on_config_mismatch not in ("raise", "warn"):
        raise ValueError(f"on_config_mismatch={on_config_mismatch!r}: use 'raise' or 'warn'")
    wanted = get_transformer_config(config) if isinstance(config, str) else config
    text_len = wanted.text_len if wanted is not None else 512
    found = read_diffusers_config(folder, text_len=text_len)
    if wanted is not None:
        diffs = config_differences(wanted, found, ARCHITECTURE_FIELDS)
        if diffs:
            detail = "; ".join(f"{n}: requested {a!r}, config.json {b!r}" for n, a, b in diffs)
            message = f"{folder / CONFIG_NAME} disagrees with the requested config: {detail}"
            if on_config_mismatch == "raise":
                raise ValueError(message)
            warnings.warn(message + " (using config.json)", stacklevel=3)
    return found


def load_transformer(
    folder: str | Path,
    *,
    config: str | WanTransformerConfig | None = None,
    param_dtype: jnp.dtype = jnp.float32,
    dtype: jnp.dtype = jnp.float32,
    on_config_mismatch: Literal["raise", "warn"] = "raise",
    shardings: Callable[[WanTransformer], nnx.State] | None = None,
    scan_layers: bool = False,
) -> WanTransformer:
    """Loads a diffusers ``WanTransformer3DModel`` folder into a ``WanTransformer``.

    Args:
        folder: folder with ``config.json`` and ``diffusion_pytorch_model.safetensors`` (or shards
            plus ``diffusion_pytorch_model.safetensors.index.json``).
        config: preset name or config the caller expects; compared with config.json, which wins.
        param_dtype: parameter dtype (float32 islands stay float32); tensors are cast as read.
        dtype: compute dtype.
        on_config_mismatch: "raise" (default) or "warn" when ``config`` and config.json differ.
        shardings: maps the abstract model to an ``nnx.State`` of ``jax.sharding.Sharding`` (e.g.
            ``functools.partial(models.sharding.param_shardings, mesh=mesh, rule="fsdp")``).
            Each tensor is placed on its devices as it is read, so no device ever holds the
            whole model unsharded (14B on 8 devices). None keeps the default device.
        scan_layers: build the scanned form: each block parameter's per-layer tensors are
            stacked along a leading layer axis (placed layer by layer as read, then stacked on
            their devices once the last layer is in).

    Returns:
        The fully loaded model.

    Raises:
        FileNotFoundError: missing folder, config.json or weight files.
        ValueError: pickle weights, config mismatch, missing or unexpected keys, a shape
            mismatch or an unsupported tensor dtype (all found before any weight is read).
    """
    folder = Path(folder)
    _check_folder(folder)
    cfg = _resolve_config(folder, config, on_config_mismatch)
    key_map = diffusers_key_map(cfg)
    # key -> layer index within a stacked parameter (scanned model), None for unstacked ones.
    layer_of: dict[str, int | None] = dict.fromkeys(key_map)
    if scan_layers:
        for key, (path, transform) in list(key_map.items()):
            path, layer_of[key] = stacked_path(path)
            key_map[key] = (path, transform)

    graphdef, abstract_state = nnx.split(
        abstract_transformer(cfg, param_dtype=param_dtype, dtype=dtype, scan_layers=scan_layers)
    )
    abstract = dict(nnx.to_flat_state(abstract_state))
    unmapped = set(abstract) - {path for path, _ in key_map.values()}
    if unmapped:  # a bug in this module, not in the checkpoint
        raise RuntimeError(f"model parameters without a checkpoint key: {sorted(unmapped)}")

    shards = _weight_files(folder)
    targets = _Targets(key_map, abstract, layer_of)
    _check_headers(folder, shards, targets)
    placement = {}
    if shardings is not None:
        placement = {
            path: var.get_value()
            for path, var in nnx.to_flat_state(shardings(nnx.merge(graphdef, abstract_state)))
        }
    values = _stream_tensors(folder, shards, targets, placement)

    state = nnx.from_flat_state(
        [(path, var.replace(values[path])) for path, var in abstract.items()]
    )
    return nnx.merge(graphdef, state)


@dataclasses.dataclass(frozen=True)
class _Targets:
    """Checkpoint key → the model parameter it fills, for both loading passes.

    Attributes:
        key_map: key → (parameter path, layout transform).
        abstract: parameter path → its abstract variable (shape and dtype).
        layer_of: key → layer index within a stacked parameter (scanned model), None otherwise.
    """

    key_map: dict[str, tuple[Path_, Callable]]
    abstract: dict[Path_, nnx.Variable]
    layer_of: dict[str, int | None]

    def of(self, key: str) -> tuple[Path_, Callable, Any, int | None]:
        """(path, transform, abstract value, layer) of a mapped key."""
        path, transform = self.key_map[key]
        return path, transform, self.abstract[path].get_value(), self.layer_of[key]


def _check_headers(folder: Path, shards: dict[str, list[str]], targets: _Targets) -> None:
    """Pass 1, headers only: every problem (keys, shapes, dtypes) is reported before any tensor
    is read, in one ``ValueError``."""
    location: dict[str, str] = {}
    problems: list[str] = []
    for name, index_keys in shards.items():
        with safe_open(folder / name, framework="flax") as f:
            keys = set(f.keys())
            absent = set(index_keys) - keys
            if absent:
                problems.append(
                    f"{INDEX_NAME} places keys in {name} that it lacks: {_listing(absent)}"
                )
            for key in keys:
                if key in location:
                    problems.append(f"key {key} appears in both {location[key]} and {name}")
                location[key] = name
                if key in targets.key_map:
                    problems.extend(_tensor_problems(f, key, targets))
    missing = set(targets.key_map) - set(location)
    unexpected = {
        k
        for k in location
        if k not in targets.key_map and not any(s in k for s in _IGNORED_KEY_FRAGMENTS)
    }
    if missing:
        problems.append(f"missing keys {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected keys {_listing(unexpected)}")
    if problems:
        raise ValueError(f"cannot load {folder}: " + "; ".join(problems))


def _tensor_problems(f: Any, key: str, targets: _Targets) -> list[str]:
    """A mapped tensor's shape and dtype against the parameter it fills (header only)."""
    _, transform, target, layer = targets.of(key)
    layer_shape = target.shape if layer is None else target.shape[1:]
    expected = _TORCH_SHAPE[transform](layer_shape)
    found_slice = f.get_slice(key)
    found_shape = tuple(found_slice.get_shape())
    problems = []
    if found_shape != expected:
        problems.append(f"shape mismatch for {key}: expected {expected}, found {found_shape}")
    found_dtype = found_slice.get_dtype()
    if found_dtype not in _SUPPORTED_DTYPES:
        problems.append(
            f"unsupported dtype {found_dtype} for {key}; supported: {', '.join(_SUPPORTED_DTYPES)}"
        )
    return problems


def _stream_tensors(
    folder: Path,
    shards: dict[str, list[str]],
    targets: _Targets,
    placement: dict[Path_, jax.sharding.Sharding],
) -> dict[Path_, jax.Array]:
    """Pass 2: streams tensor by tensor, converting layout and dtype as each is read, placing
    each on its devices; a stacked parameter is stacked once its last layer is in."""
    values: dict[Path_, jax.Array] = {}
    layers: dict[Path_, dict[int, jax.Array]] = {}  # a stacked parameter's layers read so far
    for name in shards:
        with safe_open(folder / name, framework="flax") as f:
            for key in f.keys():
                if key not in targets.key_map:
                    continue
                path, transform, target, layer = targets.of(key)
                value = transform(f.get_tensor(key)).astype(target.dtype)
                if layer is None:
                    values[path] = _place(value, placement.get(path))
                    continue
                pieces = layers.setdefault(path, {})
                pieces[layer] = _place(value, _layer_sharding(placement.get(path)))
                if len(pieces) == target.shape[0]:
                    values[path] = _stack(layers.pop(path), placement.get(path))
    return values
