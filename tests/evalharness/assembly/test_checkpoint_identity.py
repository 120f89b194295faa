"""Checkpoint identities: every component folder (transformer, VAE, text encoder, tokenizer) by
content, not by name or modification time; large files sampled, not read whole."""

import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

from evalharness.assembly.components import (
    CHECKPOINT_PARTS,
    checkpoint_identities,
    checkpoint_identity,
    file_identity,
)
from models.checkpoint import WanCheckpoint

# ----------------------------------------------------------------------------- component identity


def _write_checkpoint(root):
    rng = np.random.default_rng(0)
    for part in ("transformer", "vae", "text_encoder"):
        folder = root / part
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"part": part, "dim": 8}))
        stem = "model" if part == "text_encoder" else "diffusion_pytorch_model"
        save_file(
            {"w": rng.standard_normal((4, 4)).astype(np.float32)},
            str(folder / f"{stem}.safetensors"),
        )
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer.json").write_text(json.dumps({"vocab": ["a", "b"]}))
    (root / "tokenizer" / "special_tokens_map.json").write_text("{}")
    return WanCheckpoint(root, *(root / part for part in CHECKPOINT_PARTS))


def test_checkpoint_identity_covers_every_part_by_content(tmp_path):
    checkpoint = _write_checkpoint(tmp_path / "ckpt")
    base = checkpoint_identities(checkpoint)
    assert list(base) == ["transformer", "vae", "text_encoder", "tokenizer"]
    identity = checkpoint_identity("wan2.1-t2v-1.3b", checkpoint)
    assert identity.startswith("wan2.1-t2v-1.3b|transformer=") and "tokenizer=" in identity

    # A copy elsewhere, with fresh modification times, is the same checkpoint.
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint.root, copy, copy_function=shutil.copy)
    for path in copy.rglob("*"):
        os.utime(path, (1, 1))
    copied = WanCheckpoint(copy, *(copy / part for part in CHECKPOINT_PARTS))
    assert checkpoint_identity("wan2.1-t2v-1.3b", copied) == identity
    (copy / "vae" / ".DS_Store").write_text("hidden")  # hidden files are not read by the run
    assert checkpoint_identities(copied) == base

    def edit(part, change):
        nonlocal copied
        shutil.rmtree(copy)
        shutil.copytree(checkpoint.root, copy)
        change(copy / part)
        got = checkpoint_identities(copied)
        assert got[part] != base[part], part
        assert {p: v for p, v in got.items() if p != part} == {
            p: v for p, v in base.items() if p != part
        }
        assert checkpoint_identity("wan2.1-t2v-1.3b", copied) != identity

    for part in ("transformer", "vae", "text_encoder"):
        edit(part, lambda f: (f / "config.json").write_text(json.dumps({"dim": 9})))
    edit("tokenizer", lambda f: (f / "tokenizer.json").write_text('{"vocab": ["a", "c"]}'))
    edit("tokenizer", lambda f: (f / "spiece.model").write_bytes(b"extra tokenizer file"))
    edit("vae", lambda f: (f / "extra.safetensors.index.json").write_text("{}"))


def test_safetensors_identity_reads_header_and_samples_not_names_or_times(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    weights = np.arange(16, dtype=np.float32).reshape(4, 4)
    save_file({"w": weights}, str(a))
    save_file({"w": weights}, str(b))
    os.utime(b, (5, 5))
    assert file_identity(a) == file_identity(b)
    save_file({"w": weights.astype(np.float16)}, str(b))  # another dtype (header)
    assert file_identity(a) != file_identity(b)
    save_file({"w": weights.reshape(2, 8)}, str(b))  # another shape, same bytes
    assert file_identity(a) != file_identity(b)
    save_file({"w2": weights}, str(b))  # another tensor name
    assert file_identity(a) != file_identity(b)
    save_file({"w": weights + 1}, str(b))  # same layout, other weights (sampled bytes)
    assert file_identity(a) != file_identity(b)


def test_large_files_are_sampled_not_read_whole(tmp_path, monkeypatch):
    import evalharness.assembly.components as components

    monkeypatch.setattr(components, "_FULL_HASH_BYTES", 1024)
    monkeypatch.setattr(components, "_SAMPLE_BYTES", 256)
    path = tmp_path / "big.bin"
    data = bytearray(np.arange(4096, dtype=np.uint8).tobytes())
    path.write_bytes(bytes(data))
    base = file_identity(path)
    data[2000] ^= 1  # the middle of a large file is not read
    path.write_bytes(bytes(data))
    assert file_identity(path) == base
    data[10] ^= 1
    path.write_bytes(bytes(data))
    assert file_identity(path) != base
    path.write_bytes(bytes(data) + b"x")
    assert file_identity(path) != base
