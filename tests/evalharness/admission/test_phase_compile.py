"""The text encoder and the VAE decode compiled as the run calls them: their rows, FLOPs and the
compile row. Here on this host's XLA (the same code the TPU and H200 compilers run); the real TPU
topology in the slow test at the end."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from evalharness.admission import dry_run
from evalharness.admission.phase_compile import (
    PHASE_ROWS,
    PhaseProgram,
    compile_phases,
    compiled_figures,
    compiled_work,
    with_compiled_phases,
)
from evalharness.admission.run_timing import decode_tiles, samples_per_step, time_of
from evalharness.config import to_config
from evalharness.estimates import CompiledProgram, MemoryTable, TpuCompiler, get_target
from evalharness.estimates.run_time import text_encoder_flops, vae_decode_flops
from models.accelerator_env import libtpu_installed
from models.config import get_transformer_config
from models.tiny_components import TINY_UMT5_CONFIG, TINY_VAE_CONFIG
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config

MIB = 2**20
HOST = TpuCompiler("cpu:1x1", "host CPU", 1, "test", jax.devices("cpu")[0], toolchain="XLA")


def _config(tmp_path: Path, *overrides: str, small: bool = True):
    cfg = to_config(small_config(tmp_path, *overrides, small=small))
    video = VideoGeometry(cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width)
    return cfg, get_transformer_config(cfg.model.name), video


def test_a_checkpoint_decodes_one_full_size_window_per_distinct_tile_window(tmp_path):
    # 720p: latent 90 x 160; 32-latent tiles every 24: window rows start at 0, 24, 48 and 58
    # (the cut tile's window ends at the edge), columns at 0, 24, ..., 120 and 128: 4 x 7.
    cfg, _, video = _config(tmp_path, "model=wan2.1-t2v-14b", "resolution=720p", small=False)
    hw, calls = decode_tiles(cfg)
    assert hw == (32, 32)
    assert calls == 4 * 7
    # The seeded presets decode the whole latent in one call.
    cfg, _, video = _config(tmp_path)
    assert decode_tiles(cfg) == (tuple(video.latent_shape()[-2:]), 1.0)


def _phases():
    """Two programs as a compiler reports them (MiB: arguments, output, temporaries, code)."""
    return {
        "encode": PhaseProgram(_program(21, 1, 3, 1, 40.0), 9.7e12, 1.0, "UMT5"),
        "decode": PhaseProgram(_program(1, 2, 6, 1, 20.0), 4.4e13, 23.2, "a tile"),
    }


def _program(args: int, out: int, temp: int, code: int, seconds: float) -> CompiledProgram:
    return CompiledProgram(args * MIB, out * MIB, temp * MIB, code * MIB, seconds)


@pytest.mark.slow
def test_both_phases_compile_as_the_run_calls_them(tmp_path):
    cfg, tcfg, video = _config(tmp_path, "chip_compile_phases=encoder_and_vae")
    phases = compile_phases(cfg, tcfg, HOST)
    assert set(phases) == set(PHASE_ROWS)
    for phase in phases.values():
        program = phase.program
        assert program.argument_bytes > 0 and program.output_bytes > 0
        assert phase.flops > 0 and phase.total_flops == phase.flops * phase.calls


def test_the_phases_rows_are_the_compiled_programs_peaks():
    phases = _phases()
    model = MemoryTable(
        rows={
            "transformer weights": {"dense": 100 * MIB, "sparse": 100 * MIB},
            "text encoder": {"dense": 1, "sparse": 1},
            "denoising step (compiled)": {"dense": 5 * MIB, "sparse": 7 * MIB},
            "VAE decode": {"dense": 2, "sparse": 2},
        },
        phases={
            "transformer weights": "resident",
            "text encoder": "encode",
            "denoising step (compiled)": "denoise",
            "VAE decode": "decode",
        },
        notes={"text encoder": "ours (our model)", "VAE decode": "ours (our model)"},
        device_bytes=1024 * MIB,
    )
    table = with_compiled_phases(model, phases, HOST.describe())
    for phase, component in PHASE_ROWS.items():
        peak = phases[phase].program.peak_bytes
        assert table.rows[component] == {"dense": peak, "sparse": peak}
        assert table.phase_bytes("sparse")[phase] == 100 * MIB + peak
        assert "our model" not in table.notes[component]
        assert HOST.describe() in table.notes[component]
    assert table.rows["denoising step (compiled)"] == model.rows["denoising step (compiled)"]


@pytest.mark.slow
def test_the_time_table_takes_the_compiled_flops_and_a_compile_row(tmp_path):
    cfg, tcfg, video = _config(tmp_path, "dtype=float32")
    phases = _phases()
    compiled = compiled_work({"dense": _Loop(30.0), "sparse": _Loop(50.0)}, phases, "the chip")
    target = get_target("h200")
    ours = time_of(cfg, tcfg, target, 1, None)
    timing = time_of(cfg, tcfg, target, 1, None, compiled)
    # Each prompt of a pair (two with guidance) the compiled program's FLOPs, at our rate.
    prompts = samples_per_step(cfg)
    ours_flops = text_encoder_flops(TINY_UMT5_CONFIG, tcfg.text_len, prompts)
    ratio = prompts * phases["encode"].total_flops / ours_flops
    assert timing.once["text encoding"]["shared"] == pytest.approx(
        ours.once["text encoding"]["shared"] * ratio, rel=1e-9
    )
    assert timing.once["compile"]["dense"] == 30.0
    assert timing.once["compile"]["shared"] == 60.0
    assert timing.once["compile"]["sparse"] == 50.0
    assert "not known here" in timing.once_sources["compile"]
    assert "cost analysis by the chip" in timing.once_sources["VAE decode"]
    assert "compile" not in ours.once
    # The decode: every tile's FLOPs at our model's float32 rate.
    ratio = phases["decode"].total_flops / _decode_flops(cfg, video)
    assert timing.once["VAE decode"]["dense"] == pytest.approx(
        ours.once["VAE decode"]["dense"] * ratio, rel=1e-9
    )


@pytest.mark.slow
def test_a_compiler_that_counts_no_flops_leaves_our_count_and_says_so(tmp_path):
    # XLA's GPU compiler's cost analysis reports 0 FLOPs for the UMT5 and VAE programs.
    cfg, tcfg, video = _config(tmp_path, "dtype=float32")
    compiled = dataclasses.replace(
        compiled_work({"dense": _Loop(30.0)}, _phases(), "the GPU"), encode_flops=0.0,
        decode_flops=0.0,
    )  # fmt: skip
    target = get_target("h200")
    ours = time_of(cfg, tcfg, target, 1, None)
    timing = time_of(cfg, tcfg, target, 1, None, compiled)
    for row in ("text encoding", "VAE decode"):
        assert (
            timing.once[row] == ours.once[row]
            and ours.once[row]["shared" if row == "text encoding" else "dense"] > 0
        )
        assert "ours: XLA's cost analysis by the GPU counts no FLOPs" in timing.once_sources[row]
    assert timing.once["compile"]["dense"] == 30.0


def _decode_flops(cfg, video) -> float:
    frames, h, w = video.latent_shape()[1:]
    return vae_decode_flops(TINY_VAE_CONFIG, frames, (h, w), None)


class _Loop:
    def __init__(self, seconds: float):
        self.compile_s = seconds


@pytest.mark.slow
@pytest.mark.skipif(not libtpu_installed(), reason="needs libtpu: pip install -e '.[tpu]'")
def test_a_tpu_dry_run_compiles_the_text_encoder_and_the_vae_for_the_chip(tmp_path):
    cfg = small_config(
        tmp_path,
        "dry_run=true",
        "target=tpu-v6e-1",
        "chip_compile=step",
        "chip_compile_phases=encoder_and_vae",
        # What is under test is the text encoder's and the VAE decode's programs, so the loops
        # are dense (the sparse loop's chip compile has its own tests) and the video small:
        # 9 x 128 x 128 (192 tokens, 128-token TPU tiles; the small config's 8 x 8 tiles suit no
        # TPU). At the embedded default's 33 x 192 x 320 the VAE's chip compile alone took
        # minutes on two cores; here the whole dry run about 50 s.
        "schedule=dense",
        "resolution.frames=9",
        "resolution.height=128",
        "resolution.width=128",
        "kernel.block_q=128",
        "kernel.block_kv=128",
        small=False,
    )
    code, report = dry_run(cfg)
    assert code == 0, report
    assert "the text encoder and the VAE decode compiled too" in report
    for component in PHASE_ROWS.values():
        row = next(line for line in report.splitlines() if line.startswith(f"- {component}:"))
        assert "compiled by TPU v6 lite 1x1 by libtpu" in row and "our model" not in row
    assert "| compile |" in report


def test_the_default_compiles_the_text_encoder_alone(tmp_path):
    cfg, tcfg, video = _config(tmp_path)
    assert compile_phases(cfg, tcfg, HOST).keys() == {"encode"}
    cfg, tcfg, video = _config(tmp_path, "chip_compile_phases=none")
    assert compile_phases(cfg, tcfg, HOST) == {}


@pytest.mark.slow
def test_a_phase_not_compiled_keeps_our_flops_and_the_compile_row_stays(tmp_path):
    cfg, tcfg, video = _config(tmp_path, "dtype=float32")
    target = get_target("h200")
    ours = time_of(cfg, tcfg, target, 1, None)
    encoder_only = {"encode": _phases()["encode"]}
    timing = time_of(
        cfg, tcfg, target, 1, None, compiled_work({"dense": _Loop(30.0)}, encoder_only, "X")
    )
    assert timing.once["VAE decode"] == ours.once["VAE decode"]
    assert "chip_compile_phases=encoder_and_vae compiles it" in timing.once_sources["VAE decode"]
    assert timing.once["text encoding"] != ours.once["text encoding"]
    assert timing.once["compile"]["dense"] == 30.0 and timing.once["compile"]["shared"] == 40.0
    # The loops alone compiled: both phases ours, the loops' compile row still there.
    loops_only = time_of(cfg, tcfg, target, 1, None, compiled_work({"dense": _Loop(30.0)}, {}, "X"))
    assert loops_only.once["text encoding"] == ours.once["text encoding"]
    assert "chip_compile_phases=encoder compiles it" in loops_only.once_sources["text encoding"]
    assert loops_only.once["compile"]["dense"] == 30.0
    assert compiled_work({}, {}, "X") is None


def test_a_programs_figures_are_kept_and_read_back_for_the_same_program(tmp_path):
    def lowered(n: int):
        x = jax.ShapeDtypeStruct((n, n), jnp.float32)
        return jax.jit(lambda a: jnp.tanh(a @ a)).lower(x)

    program, flops = compiled_figures(lowered(64), HOST, tmp_path)
    kept = list((tmp_path / "chip_programs").glob("*.json"))
    assert len(kept) == 1 and flops > 0
    assert compiled_figures(lowered(64), HOST, tmp_path) == (program, flops)
    # Another program is another entry; a damaged entry is compiled again and rewritten.
    compiled_figures(lowered(32), HOST, tmp_path)
    assert len(list((tmp_path / "chip_programs").glob("*.json"))) == 2
    kept[0].write_text("{not json")
    again, again_flops = compiled_figures(lowered(64), HOST, tmp_path)
    assert again_flops == flops and again.argument_bytes == program.argument_bytes
    assert json.loads(kept[0].read_text())["flops"] == flops
