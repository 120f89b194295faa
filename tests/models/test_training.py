"""Training the tiny Wan: the flow-matching loss falls, a resumed run equals an uninterrupted one,
the exported folder loads through the checkpoint path a real Wan folder uses, the decoder stage
run on an export, refusals."""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models.checkpoint import checkpoint_prompt_encoder, checkpoint_vae, locate_checkpoint
from models.loading import load_transformer
from models.shapes_data import make_clip
from models.tokenizer import TokenizerJsonTokenizer
from models.training import flow_stage, refine_decoder, run_folder
from models.training.__main__ import main
from models.training.export import export_checkpoint, save_word_tokenizer
from models.training.flow_stage import (
    TextToVideo,
    flow_batch,
    flow_loss,
    prompt_tokenizer,
    train_flow,
    train_phases,
)
from models.training.settings import UNCONDITIONAL_PROMPTS, TrainSettings, preset
from models.training.tracking import CallbackLogger
from models.training.vae_stage import (
    crop_batch,
    crop_shape,
    fine_tune_decoder,
    train_vae,
    zero_init_residual_branches,
)
from models.vae_blocks import AttentionBlock, ResidualBlock
from models.vae_encoder import WanAutoencoder, load_autoencoder, with_latent_statistics

# The smoke preset, smaller still: one compile of a one-block transformer on 2x2x3 latent tokens.
SETTINGS = dataclasses.replace(preset("smoke"), transformer_steps=16, checkpoint_every=4)
PROMPTS = [
    "a red circle moves slowly to the left on a dark blue background",
    "a white square moves quickly up on a black background",
]


def _pool() -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 16, 1, 4, 6)).astype(np.float32)
    return np.repeat(base, 2, axis=2).astype(np.float16)  # [N, C, F=2, h, w]


def _silent():
    return CallbackLogger(lambda *_: None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The flow stage trained for 8 steps, its run folder and its logged losses."""
    run_dir = tmp_path_factory.mktemp("run")
    losses = []
    logger = CallbackLogger(lambda name, value, step: losses.append(value))
    model = train_flow(SETTINGS, run_dir, logger, _pool(), PROMPTS, progress=False)
    return model, run_dir, losses


def _fixed_batch_loss(model: TextToVideo) -> float:
    batch = {k: jnp.asarray(v) for k, v in flow_batch(SETTINGS, 0, _pool(), PROMPTS).items()}
    return float(nnx.jit(flow_loss)(model, batch))


def test_the_flow_matching_loss_falls(trained):
    model, _, losses = trained
    assert len(losses) == SETTINGS.transformer_steps
    fresh = TextToVideo(SETTINGS, rngs=nnx.Rngs(SETTINGS.seed))
    assert _fixed_batch_loss(model) < 0.8 * _fixed_batch_loss(fresh)


@pytest.mark.slow  # two training phases, each its own compile: about 8 s on 2 cores
def test_the_full_size_phase_continues_from_the_coarse_one(tmp_path):
    settings = dataclasses.replace(SETTINGS, coarse_steps=8, coarse_clips=2, coarse_batch=2)
    coarse, full = settings.flow_phases()
    assert (coarse.name, full.name) == ("transformer-coarse", "transformer")
    assert (coarse.steps, full.steps) == (8, SETTINGS.transformer_steps)
    assert (coarse.pool_file, full.pool_file) == ("latents-transformer-coarse.npy", "latents.npy")
    assert coarse.prompts_file == "prompts-transformer-coarse.json"
    logged = []
    logger = CallbackLogger(lambda name, value, step: logged.append(name))
    # The coarse pool's clips are smaller (1 x 2 x 4 latent tokens): the transformer takes both.
    small = _pool()[:, :, :1, :2, :4]
    model = train_flow(settings, tmp_path, logger, small, PROMPTS, phase=coarse, progress=False)
    after_coarse = _fixed_batch_loss(model)
    assert after_coarse < 0.8 * _fixed_batch_loss(TextToVideo(SETTINGS, rngs=nnx.Rngs(0)))
    model = train_flow(
        settings, tmp_path, logger, _pool(), PROMPTS, phase=full, model=model, progress=False
    )
    assert logged == ["coarse_flow_loss"] * 8 + ["flow_loss"] * SETTINGS.transformer_steps
    assert (tmp_path / "checkpoints" / "transformer-coarse.npz").is_file()
    assert (tmp_path / "checkpoints" / "transformer.npz").is_file()
    assert _fixed_batch_loss(model) < after_coarse
    # Each phase draws its own batches.
    a, b = (flow_batch(settings, 0, _pool(), PROMPTS, p)["noise"] for p in (coarse, full))
    assert not np.array_equal(a, b)


@pytest.mark.slow  # a training run of its own: about 4 s on 2 cores
def test_a_frozen_text_encoder_keeps_its_seeded_weights(tmp_path):
    settings = dataclasses.replace(SETTINGS, transformer_steps=4, freeze_text_encoder=1)
    model = train_flow(settings, tmp_path, _silent(), _pool(), PROMPTS, progress=False)
    seeded = TextToVideo(settings, rngs=nnx.Rngs(settings.seed))
    for a, b in zip(
        jax.tree.leaves(nnx.state(seeded.text_encoder, nnx.Param)),
        jax.tree.leaves(nnx.state(model.text_encoder, nnx.Param)),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    flow_stage.zero_init_residual_branches(seeded.transformer)
    moved = [
        not np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(
            jax.tree.leaves(nnx.state(seeded.transformer, nnx.Param)),
            jax.tree.leaves(nnx.state(model.transformer, nnx.Param)),
            strict=True,
        )
    ]
    assert sum(moved) > len(moved) // 2


def test_attribute_dropout_says_some_prompts_in_part():
    said = lambda s, step: flow_batch(s, step, _pool(), PROMPTS)["input_ids"]  # noqa: E731
    partial = dataclasses.replace(SETTINGS, attribute_dropout=0.5, prompt_dropout=0.0)
    whole = dataclasses.replace(partial, attribute_dropout=0.0)

    def lengths(settings):
        return [int((row > 0).sum()) for step in range(20) for row in said(settings, step)]

    assert min(lengths(partial)) < min(lengths(whole))
    assert max(lengths(partial)) == max(lengths(whole))  # some prompts are still said whole
    # Without it the batches are those of a run that never had the setting.
    np.testing.assert_array_equal(
        said(whole, 3), said(dataclasses.replace(SETTINGS, prompt_dropout=0.0), 3)
    )


def test_without_coarse_steps_there_is_one_phase():
    (only,) = SETTINGS.flow_phases()
    assert (only.name, only.clips, only.batch) == ("transformer", 4, SETTINGS.transformer_batch)


class _Interrupt(Exception):
    pass


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(trained, tmp_path):
    model, _, _ = trained

    def stop_at_step_6(name, value, step):
        if step == 6:  # after the checkpoint at step 4, before the one at step 8
            raise _Interrupt

    with pytest.raises(_Interrupt):
        train_flow(
            SETTINGS, tmp_path, CallbackLogger(stop_at_step_6), _pool(), PROMPTS, progress=False
        )
    # Restores step 4 (weights and optimizer state) and runs the rest.
    resumed = train_flow(SETTINGS, tmp_path, _silent(), _pool(), PROMPTS, progress=False)
    for a, b in zip(
        jax.tree.leaves(nnx.state(model)), jax.tree.leaves(nnx.state(resumed)), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_clips_rendered_in_several_processes_are_the_sequential_ones(monkeypatch):
    settings = dataclasses.replace(preset("smoke"), latent_clips=5, track_spread=0.5)
    phase = settings.flow_phases()[-1]
    monkeypatch.setattr(flow_stage, "rendering_processes", lambda: 2)
    parallel = list(flow_stage.rendered_clips(phase, settings))
    assert len(parallel) == 5
    for i, (spec, frames) in enumerate(parallel):
        expected_spec, expected = make_clip(i, "train", 5, 32, 48, settings.two_shape_prob, 0.5)
        assert spec == expected_spec
        np.testing.assert_array_equal(frames, expected)


@pytest.mark.slow  # renders clips, encodes and trains twice: about 6 s on 2 cores
def test_a_finished_phase_reloads_its_weights_without_its_pool(tmp_path):
    settings = dataclasses.replace(preset("smoke"), transformer_steps=2, latent_clips=2)
    autoencoder = WanAutoencoder(settings.vae_config(), rngs=nnx.Rngs(0))
    trained = train_phases(autoencoder, settings, tmp_path, _silent(), progress=False)
    (tmp_path / "latents.npy").unlink()
    reloaded = train_phases(autoencoder, settings, tmp_path, _silent(), progress=False)
    assert not (tmp_path / "latents.npy").exists()
    for a, b in zip(
        jax.tree.leaves(nnx.state(trained)), jax.tree.leaves(nnx.state(reloaded)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_tokenizer_file_gives_the_word_tokenizer_ids(tmp_path):
    words = prompt_tokenizer()
    save_word_tokenizer(tmp_path, words)
    from_file = TokenizerJsonTokenizer(tmp_path / "tokenizer.json")
    assert (from_file.pad_id, from_file.eos_id) == (words.pad_id, words.eos_id)
    texts = [*PROMPTS, *UNCONDITIONAL_PROMPTS, "", "A RED Circle,, moves: naïve café ✓ 日本 </s>"]
    for text in texts:
        assert from_file.tokenize(text) == words.tokenize(text)
    assert words.unk_id not in words.tokenize(" ".join(PROMPTS))


@pytest.mark.slow  # compiles the loaded model beside the trained one: about a minute on 2 cores
def test_the_export_loads_through_the_checkpoint_path(trained, tmp_path):
    model, _, _ = trained
    ae = WanAutoencoder(SETTINGS.vae_config(), rngs=nnx.Rngs(0))
    ae = with_latent_statistics(ae, tuple(np.linspace(-0.2, 0.2, 16)), tuple(np.full(16, 1.5)))
    folder = export_checkpoint(
        tmp_path / "ckpt",
        autoencoder=ae,
        text_encoder=model.text_encoder,
        transformer=model.transformer,
        settings=SETTINGS,
        command=["python", "-m", "models.training"],
        metrics={"flow_loss": 1.0},
    )
    checkpoint = locate_checkpoint(folder)
    cfg = SETTINGS.transformer_config()
    transformer = load_transformer(checkpoint.transformer, config=cfg)
    encoder = checkpoint_prompt_encoder(checkpoint, max_length=cfg.text_len)
    assert checkpoint_vae(checkpoint).config == ae.config
    # The loaded model computes what the trained one does, up to float16 storage.
    batch = {k: jnp.asarray(v) for k, v in flow_batch(SETTINGS, 3, _pool(), PROMPTS).items()}
    context = encoder.encode([PROMPTS[0]])
    expected_context = model.context(*(batch[k][:1] for k in ("input_ids", "attention_mask")))
    tokens = encoder.tokenizer.tokenize(PROMPTS[0])
    assert np.asarray(batch["input_ids"][0, : len(tokens)]).tolist() == tokens
    np.testing.assert_allclose(context, expected_context, atol=2e-2 * np.abs(context).max())
    x = batch["x0"][:1]
    ours = transformer(x, jnp.full((1,), 500.0), jnp.asarray(context))
    theirs = model.transformer(x, jnp.full((1,), 500.0), jnp.asarray(context))
    np.testing.assert_allclose(ours, theirs, atol=2e-2 * float(jnp.abs(theirs).max()))
    record = (folder / "training.json").read_text()
    assert '"settings"' in record and '"commit"' in record and '"command"' in record


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "vae_stepz=3"], "--set vae_stepz=3: expected name=value with a name among"),
        (["--set", "vae_steps=many"], "--set vae_steps=many: expected an integer"),
        (["--set", "frames=32"], "frames must be 4k+1"),
        (["--set", "prompt_dropout=1.5"], "prompt_dropout=1.5 must be in [0, 1)"),
        (["--set", "vae_clip_steps=13"], "vae_clip_steps=13 exceeds vae_steps=12"),
        (["--set", "vae_clip_crop_size=40"], "vae_clip_crop_size=40: must be a multiple of 16"),
        (["--set", "coarse_steps=4", "--set", "coarse_frames=8"], "coarse video 8x96x160"),
        (["--set", "attribute_dropout=1.0"], "attribute_dropout=1.0 must be in [0, 1)"),
        (["--set", "track_spread=1.5"], "track_spread=1.5 must be in [0, 1]"),
        (["--set", "freeze_text_encoder=2"], "freeze_text_encoder=2 0 or 1"),
    ],
)
def test_bad_settings_are_refused_with_exit_2(tmp_path, capsys, argv, message):
    code = main(["--out", str(tmp_path / "run"), "--preset", "smoke", "--no-mlflow", *argv])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and message in err[-1]
    assert not (tmp_path / "run").exists()


def test_a_folder_of_another_run_is_refused_with_exit_2(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "settings.json").write_text(preset("smoke", seed=5).to_json())
    code = main(["--out", str(run_dir), "--preset", "smoke", "--no-mlflow"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error:") and "seed: 5 in the folder vs 0" in err


def test_the_vae_trains_on_short_crops_then_on_whole_length_ones():
    s = preset("smoke")
    short = s.vae_steps - s.vae_clip_steps
    assert crop_shape(s, 0) == crop_shape(s, short - 1) == (s.vae_batch, s.vae_crop_frames, 32)
    assert crop_shape(s, short) == (s.vae_clip_batch, s.frames, s.vae_clip_crop_size)
    batch = crop_batch(s, s.vae_steps - 1)
    assert batch.shape == (s.vae_clip_batch, s.frames, 32, 32, 3) and batch.dtype == np.float32
    assert -1.0 <= batch.min() < batch.max() <= 1.0
    np.testing.assert_array_equal(batch, crop_batch(s, s.vae_steps - 1))  # deterministic


def test_zeroed_residual_branches_start_each_block_as_its_shortcut():
    model = WanAutoencoder(SETTINGS.vae_config(), rngs=nnx.Rngs(0))
    blocks = [n for _, n in nnx.iter_graph(model) if isinstance(n, ResidualBlock | AttentionBlock)]
    assert zero_init_residual_branches(model) == len(blocks) > 0
    block = next(b for b in blocks if isinstance(b, ResidualBlock) and b.conv_shortcut is None)
    x = jax.random.normal(jax.random.key(0), (1, 3, 4, 4, block.conv1.weight.shape[1]))
    np.testing.assert_allclose(block(x, None), x, atol=1e-6)


def test_the_transformer_starts_as_a_zero_velocity_with_each_block_its_shortcut():
    model = TextToVideo(SETTINGS, rngs=nnx.Rngs(0))
    layers = SETTINGS.num_layers
    # Per block: self-attention, cross-attention and feed-forward; then the output projection.
    assert flow_stage.zero_init_residual_branches(model.transformer) == 3 * layers + 1
    batch = {k: jnp.asarray(v) for k, v in flow_batch(SETTINGS, 0, _pool(), PROMPTS).items()}
    context = model.context(batch["input_ids"], batch["attention_mask"])
    velocity = model.transformer(batch["x0"], batch["sigma"] * 1000.0, context)
    np.testing.assert_array_equal(np.asarray(velocity), 0.0)
    # The loss then starts at E|noise - x0|², the target's own second moment.
    target = np.asarray(batch["noise"] - batch["x0"])
    np.testing.assert_allclose(float(flow_loss(model, batch)), np.mean(target**2), rtol=1e-5)


@pytest.mark.slow  # two compiles of the autoencoder's step (short and whole-length crops)
def test_the_vae_reconstruction_error_falls(tmp_path):
    errors = []
    logger = CallbackLogger(
        lambda name, value, step: errors.append(value) if name == "vae_mse" else None
    )
    settings = dataclasses.replace(preset("smoke"), vae_steps=24, vae_clip_steps=0)
    train_vae(settings, tmp_path, logger, progress=False)
    assert np.mean(errors[-4:]) < 0.5 * np.mean(errors[:4]), errors


@pytest.mark.slow  # about 20 s on a 2-core machine
def test_the_decoder_stage_trains_the_decoder_and_keeps_the_latents(tmp_path):
    settings = dataclasses.replace(preset("smoke"), vae_decoder_steps=6, checkpoint_every=3)
    model = WanAutoencoder(settings.vae_config(), rngs=nnx.Rngs(0))
    video = jnp.asarray(crop_batch(settings, 0, (1, settings.frames, 32)))
    latents = np.asarray(model.moments(video)[0])
    decoder = [np.asarray(x) for x in jax.tree.leaves(nnx.state(model.decoding, nnx.Param))]
    errors = []
    logger = CallbackLogger(
        lambda name, value, step: errors.append(value) if name == "vae_decoder_mse" else None
    )
    fine_tune_decoder(model, settings, tmp_path, logger, progress=False)
    assert len(errors) == 6 and (tmp_path / "checkpoints" / "vae-decoder.npz").is_file()
    np.testing.assert_array_equal(np.asarray(model.moments(video)[0]), latents)
    after = jax.tree.leaves(nnx.state(model.decoding, nnx.Param))
    assert any(not np.array_equal(a, np.asarray(b)) for a, b in zip(decoder, after, strict=True))


@pytest.mark.slow  # about 14 s on a 2-core machine
def test_the_decoder_stage_refines_an_export_and_records_both_sittings(trained, tmp_path, capsys):
    model, _, _ = trained
    without = dataclasses.replace(SETTINGS, vae_decoder_steps=0)
    source = export_checkpoint(
        tmp_path / "source",
        autoencoder=WanAutoencoder(without.vae_config(), rngs=nnx.Rngs(0)),
        text_encoder=model.text_encoder,
        transformer=model.transformer,
        settings=without,
        command=["python", "-m", "models.training"],
        metrics={"flow_loss": 1.0},
    )
    argv = ["--checkpoint", str(source), "--out", str(tmp_path / "refine"), "--preset", "smoke"]
    assert refine_decoder.main([*argv, "--no-mlflow", "--quiet"]) == 0
    folder = tmp_path / "refine" / "checkpoint"
    record = json.loads((folder / "training.json").read_text())
    assert TrainSettings(**record["settings"]) == SETTINGS  # the source's, plus smoke's decoder
    assert record["command"] == ["python", "-m", "models.training"]
    stage = record["decoder_stage"]
    assert stage["command"][:3] == ["python", "-m", "models.training.refine_decoder"]
    assert len(stage["code"]["commit"]) == 40
    assert stage["metrics"]["vae_heldout_psnr_db"] == record["metrics"]["vae_heldout_psnr_db"]
    old, new = load_autoencoder(source / "vae"), load_autoencoder(folder / "vae")
    assert np.array_equal(old.encoder.conv_in.weight[...], new.encoder.conv_in.weight[...])
    changed = [
        not np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(nnx.state(old.decoding, nnx.Param)),
            jax.tree.leaves(nnx.state(new.decoding, nnx.Param)),
            strict=True,
        )
    ]
    assert any(changed)
    transformer = "transformer/diffusion_pytorch_model.safetensors"
    assert (folder / transformer).read_bytes() == (source / transformer).read_bytes()
    # An export that has the stage already, and settings the source fixed, are refused.
    capsys.readouterr()
    again = ["--checkpoint", str(folder), "--out", str(tmp_path / "again"), "--no-mlflow"]
    assert refine_decoder.main(again) == 2
    assert "was trained with a decoder stage already" in capsys.readouterr().err
    assert refine_decoder.main([*argv, "--no-mlflow", "--set", "frames=9"]) == 2
    assert "only the decoder stage's settings" in capsys.readouterr().err


def test_a_tracking_uri_password_is_neither_recorded_nor_printed(capsys):
    secret = "postgresql://ana:s3cr3t-Planted@db/mlflow"
    argv = ["--out", "x", "--tracking-uri", secret]
    recorded = run_folder.recorded_command("models.training", argv)
    assert recorded[-1] == "postgresql://ana:***@db/mlflow"

    def fails(args):
        raise ConnectionError(f"could not connect to {args.tracking_uri} (password s3cr3t-Planted)")

    parser = argparse.ArgumentParser()
    run_folder.add_common_arguments(parser)
    assert run_folder.command_main(parser, argv, fails) == run_folder.EXIT_FAILED
    err = capsys.readouterr().err
    assert "could not connect to postgresql://ana:***@db/mlflow (password ***)" in err
    assert "s3cr3t-Planted" not in err
