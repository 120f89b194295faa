"""The run's whole denoising loop compiled ahead of time, and the memory table made from it.

The TPU topology's own compile is in ``test_chip_compile.py`` (slow, libtpu); here the same code
compiles for this host's CPU (a compiler object whose chip is the CPU device), so the default
suite checks the program it builds, the weight bytes it counts and the table it makes.
"""

import jax
import pytest
from flax import nnx

from evalharness.admission.chip_compile import (
    StepProgram,
    _count_collectives,
    compile_run_step,
    describe_collectives,
    step_memory_table,
)
from evalharness.admission.sizing import _single_device_attends
from evalharness.assembly import platform_choices
from evalharness.config import to_config
from evalharness.estimates import CompiledProgram, MemoryTable, TpuCompiler
from models.config import get_transformer_config
from models.transformer import abstract_transformer
from models.video_geometry import VideoGeometry
from tests.helpers.harness_config import small_config

MIB = 2**20


def _host_compiler() -> TpuCompiler:
    cpu = jax.devices("cpu")[0]
    return TpuCompiler("cpu:1x1", "cpu", 1, "none", cpu, (cpu,))


def _config(tmp_path, *overrides):
    cfg = to_config(small_config(tmp_path, *overrides))
    return platform_choices.resolve(cfg, "cpu")


@pytest.mark.parametrize("passes", ["joint", "separate"])
def test_the_loop_compiles_with_every_layer_and_counts_the_weights_once(tmp_path, passes):
    cfg = _config(tmp_path, f"guidance_passes={passes}")
    tcfg = get_transformer_config(cfg.model.name)
    video = VideoGeometry(cfg.resolution.frames, cfg.resolution.height, cfg.resolution.width)
    attends, _ = _single_device_attends(cfg, tcfg)
    step = compile_run_step(cfg, tcfg, _host_compiler(), 1, attends["sparse"])
    weights = abstract_transformer(tcfg)
    expected = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(weights)))
    assert step.weight_bytes == expected
    latent = 16 * video.latent_frames * video.latent_height * video.latent_width * 4
    context = tcfg.text_len * tcfg.text_dim * 4
    # Noise and the two prompt embeddings in (float32), the latents out.
    assert step.input_bytes == latent + 2 * context
    assert step.program.output_bytes >= latent
    assert step.program.temp_bytes > 0 and step.program.compile_s > 0
    assert step.collectives == {"all-to-all": 0, "all-gather": 0, "all-reduce": 0}


def test_collectives_are_counted_once_per_operation_start():
    hlo = "\n".join(
        [
            "%all-to-all.1 = bf16[2,8]{1,0} all-to-all(bf16[2,8]{1,0} %x), dimensions={1}",
            "%all-to-all.2 = (bf16[2,8], bf16[2,8]) all-to-all(%a, %b), dimensions={1}",
            "%ag = (bf16[8], bf16[64]) all-gather-start(bf16[8] %w), dimensions={0}",
            "%agd = bf16[64] all-gather-done((bf16[8], bf16[64]) %ag)",
            "%fusion = f32[4] fusion(%all-to-all.1), calls=%all-reduce.fake",
        ]
    )
    assert _count_collectives(hlo) == {"all-to-all": 2, "all-gather": 1, "all-reduce": 0}


def _program(temp_mib: int, code_mib: int = 1) -> CompiledProgram:
    return CompiledProgram(
        argument_bytes=110 * MIB,
        output_bytes=2 * MIB,
        temp_bytes=temp_mib * MIB,
        code_bytes=code_mib * MIB,
        compile_s=3.0,
    )


def test_the_table_takes_the_loop_from_the_compiler_and_the_rest_from_our_model():
    model = MemoryTable(
        rows={
            "transformer weights": {"dense": 100 * MIB, "sparse": 100 * MIB},
            "text encoder": {"dense": 40 * MIB, "sparse": 40 * MIB},
            "transformer": {"dense": 900 * MIB, "sparse": 900 * MIB},
            "VAE decode": {"dense": 300 * MIB, "sparse": 300 * MIB},
        },
        phases={
            "transformer weights": "resident",
            "text encoder": "encode",
            "transformer": "denoise",
            "VAE decode": "decode",
        },
        notes={"VAE decode": "peak of one tile"},
        device_bytes=1024 * MIB,
        device="chip",
    )
    steps = {
        "dense": StepProgram(_program(200), 100 * MIB, {"all-to-all": 4}),
        "sparse": StepProgram(_program(500), 100 * MIB, {"all-to-all": 8, "all-reduce": 2}),
    }
    table = step_memory_table(
        steps,
        executors={"dense": "splash", "sparse": "b3 / splash"},
        model=model,
        runtime_overhead=0.1,
        described="TPU 1x1",
    )
    # denoise = inputs (10) + output (2) + temporaries + code (1), plus 10% runtime overhead.
    loop = {"dense": 10 + 2 + 200 + 1, "sparse": 10 + 2 + 500 + 1}
    for arm, mib in loop.items():
        overhead = int(0.1 * mib * MIB)
        assert table.phase_bytes(arm)["denoise"] == 100 * MIB + mib * MIB + overhead
    assert table.peak("dense") == 400 * MIB  # the VAE's phase is the larger: our model's row
    assert table.peak("sparse") == 100 * MIB + 513 * MIB + int(0.1 * 513 * MIB)
    assert table.executors == {"dense": "splash", "sparse": "b3 / splash"}
    assert "our model" in table.notes["VAE decode"]
    assert "transformer" not in table.rows  # the compiled loop replaces our block model
    assert describe_collectives(steps) == (
        "dense: 4 all-to-all; sparse: 8 all-to-all, 2 all-reduce"
    )
