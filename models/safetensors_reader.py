"""Reading torch-layout safetensors (single file or sharded with an index) into NNX modules.

The VAE and the UMT5 encoder keep their parameters in the exact names and shapes of the PyTorch
reference, so loading is a name lookup: ``"decoder.up_blocks.0.resnets.1.conv1.weight"`` is the NNX
path ``decoder / up_blocks / 0 / resnets / 1 / conv1 / weight``. Tensors are streamed one at a time with
``safe_open`` and cast as they arrive (never pickle, never the whole file in memory at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

INDEX_SUFFIX = ".safetensors.index.json"


class WeightsError(ValueError):
    """A weights folder is missing files, holds a corrupt file, or does not match the model."""


def find_weight_files(folder: Path, stems: tuple[str, ...]) -> dict[str, Path]:
    """Maps every tensor name to the safetensors file that holds it.

    Args:
        folder: a model sub-folder (``vae/``, ``text_encoder/``).
        stems: file stems to try in order, e.g. ``("diffusion_pytorch_model",)`` or ``("model",)``;
            ``<stem>.safetensors`` or a sharded ``<stem>.safetensors.index.json`` is accepted.

    Returns:
        ``{tensor name: file path}``.

    Raises:
        WeightsError: no weights file, an unreadable index, a shard the index names but that is absent,
            or a file that is not valid safetensors.
    """
    folder = Path(folder)
    for stem in stems:
        index = folder / f"{stem}{INDEX_SUFFIX}"
        single = folder / f"{stem}.safetensors"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise WeightsError(
                    f"{index} is not a safetensors index with a 'weight_map': {e}"
                ) from e
            shards = {name: folder / shard for name, shard in weight_map.items()}
            missing = sorted({str(p) for p in shards.values() if not p.is_file()})
            if missing:
                raise WeightsError(f"{index} names shard files that do not exist: {missing}")
            for shard in sorted(set(shards.values())):
                _check_readable(shard)
            return shards
        if single.is_file():
            names = _check_readable(single)
            return {name: single for name in names}
    expected = [f"{s}.safetensors or {s}{INDEX_SUFFIX}" for s in stems]
    raise WeightsError(f"No weights in {folder}: expected one of {expected}")


def _check_readable(path: Path) -> list[str]:
    """Opens a safetensors header; a truncated or non-safetensors file fails here, before loading."""
    try:
        with safe_open(str(path), framework="flax") as f:
            return list(f.keys())
    except Exception as e:  # safetensors raises its own SafetensorError / OSError types
        raise WeightsError(
            f"{path} is not a readable safetensors file ({type(e).__name__}: {e})"
        ) from e


def iter_tensors(
    files: dict[str, Path], names: list[str], dtype: jnp.dtype
) -> Iterator[tuple[str, jnp.ndarray]]:
    """Yields ``(name, tensor cast to dtype)`` for each requested name, one file open at a time."""
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for path, file_names in by_file.items():
        try:
            with safe_open(str(path), framework="flax") as f:
                for name in file_names:
                    yield name, jnp.asarray(f.get_tensor(name), dtype=dtype)
        except WeightsError:
            raise
        except Exception as e:
            raise WeightsError(
                f"Reading tensors from {path} failed ({type(e).__name__}: {e})"
            ) from e


def load_torch_layout(
    module: nnx.Module,
    files: dict[str, Path],
    *,
    dtype: jnp.dtype,
    aliases: dict[str, tuple[str, ...]] | None = None,
    ignore: Callable[[str], bool] = lambda name: False,
) -> None:
    """Fills every ``nnx.Param`` of ``module`` from tensors whose names are the dotted param paths.

    All names and shapes are checked before any parameter is replaced, so a failed load leaves the
    module untouched.

    Args:
        module: an NNX module whose attribute paths mirror the PyTorch state-dict names.
        files: ``{tensor name: file}`` from :func:`find_weight_files`.
        dtype: dtype the parameters are cast to.
        aliases: alternative stored names per parameter name (e.g. tied embeddings).
        ignore: predicate for stored names that are expected but unused (e.g. the VAE encoder).

    Raises:
        WeightsError: missing or unexpected tensors, or a shape mismatch (all of them listed).
    """
    aliases = aliases or {}
    params = dict(nnx.iter_graph(module))
    wanted: dict[str, nnx.Param] = {}
    for path, node in params.items():
        if isinstance(node, nnx.Param):
            wanted[".".join(str(p) for p in path)] = node
    source: dict[str, str] = {}
    missing = []
    for name in wanted:
        candidates = (name, *aliases.get(name, ()))
        found = next((c for c in candidates if c in files), None)
        if found is None:
            missing.append(name)
        else:
            source[name] = found
    used = set(source.values()) | {a for name in wanted for a in aliases.get(name, ())}
    unexpected = sorted(n for n in files if n not in used and not ignore(n))
    if missing or unexpected:
        raise WeightsError(
            f"Weights do not match the model: missing {missing[:20]} ({len(missing)} in all), "
            f"unexpected {unexpected[:20]} ({len(unexpected)} in all)"
        )
    loaded: dict[str, jnp.ndarray] = {}
    by_stored = {stored: name for name, stored in source.items()}
    bad_shapes = []
    for stored, tensor in iter_tensors(files, list(by_stored), dtype):
        name = by_stored[stored]
        expected = tuple(wanted[name].get_value().shape)
        if tuple(tensor.shape) != expected:
            bad_shapes.append(f"{stored}: stored {tuple(tensor.shape)}, model {expected}")
        loaded[name] = tensor
    if bad_shapes:
        raise WeightsError(f"Shape mismatch between weights and config: {bad_shapes[:20]}")
    for name, tensor in loaded.items():
        wanted[name].set_value(tensor)


def read_json(path: Path) -> dict:
    """Reads a JSON config, naming the file in the error when it is absent or malformed."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Missing config file {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise WeightsError(
            f"{path} is not UTF-8 text, as JSON must be ({e.reason} at byte {e.start})"
        ) from None
    except json.JSONDecodeError as e:
        raise WeightsError(f"{path} is not valid JSON: {e}") from e
    except OSError as e:
        raise WeightsError(f"{path} cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path} should hold a JSON object, got {type(data).__name__}")
    return data


def save_torch_layout(module: nnx.Module, path: Path) -> None:
    """Writes every ``nnx.Param`` under its dotted path name (the inverse of loading).

    Used to export the tiny presets as checkpoint folders, so tests and users can run the
    checkpoint code path without downloading anything.
    """
    from safetensors.numpy import save_file

    tensors = {
        ".".join(str(p) for p in path_parts): np.asarray(node.get_value())
        for path_parts, node in nnx.iter_graph(module)
        if isinstance(node, nnx.Param)
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))
