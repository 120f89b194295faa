"""Compiled for the chip: the real TPU v6e compiler (libtpu) and Mosaic, on this CPU machine.

Slow tests (CI's slow step installs the ``tpu`` extra first). Nothing here touches a TPU or the
network: ``tests/conftest.py`` sets ``JAX_PLATFORMS=cpu`` and ``TPU_SKIP_MDS_QUERY=1`` before JAX
loads, and the compile refuses to start without both (``test_the_compile_refuses_...``).
"""

import re

import jax
import jax.numpy as jnp
import pytest

from evalharness.admission import dry_run
from evalharness.estimates import get_target, topology_compiler
from evalharness.estimates.tpu_compiler import compile_for, unsafe_environment
from kernels.executors.dense_memory import dense_executor_temp_bytes
from kernels.executors.pallas_tpu import pallas_blocksparse_attention
from kernels.masks.band import BandMask, PaddingMask
from kernels.plans.block_sizes import BlockSizes
from kernels.plans.tiles import build_plan
from models.accelerator_env import libtpu_installed
from models.config import get_transformer_config
from tests.helpers.harness_config import small_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not libtpu_installed(),
        reason="needs libtpu: pip install -e '.[tpu]' (.ci/run installs it before the slow step)",
    ),
]

# 14B at 480p over 8 chips, after the head exchange: every token, 40 / 8 heads, bf16; the seed's
# tiles. A real per-chip shape that Mosaic compiles in seconds on 2 cores.
TOKENS, HEADS, HEAD_DIM = 32760, 5, 128
SEED_TILES = BlockSizes(3328, 1536)


def test_the_environment_is_safe_for_libtpu():
    assert unsafe_environment() is None


def test_each_tpu_target_compiles_for_its_topology():
    for name in ("tpu-v6e-1", "tpu-v6e-8"):
        target = get_target(name)
        compiler = topology_compiler(target.topology)
        assert compiler.chips == target.devices
        assert compiler.device_kind == "TPU v6 lite"
        assert compiler.describe().startswith(f"TPU v6 lite {target.topology[4:]} by libtpu ")


@pytest.mark.parametrize("variant", ["b0", "b1", "b2", "b3"])
def test_mosaic_compiles_every_variant_at_a_per_chip_shape(variant):
    mask = PaddingMask(TOKENS) if variant == "b0" else BandMask(TOKENS, 4000, 1560)
    plan = build_plan(mask, SEED_TILES, variant, rounding_tolerance=None)
    qkv = jax.ShapeDtypeStruct((2, TOKENS, HEADS, HEAD_DIM), jnp.bfloat16)

    def call(q, k, v):
        return pallas_blocksparse_attention(q, k, v, plan, variant=variant)

    program = compile_for(topology_compiler("v6e:2x4").device, call, qkv, qkv, qkv)
    tensor = 2 * TOKENS * HEADS * HEAD_DIM * 2
    # The visit tables are constants of the program: the arguments are q, k, v alone.
    assert (program.argument_bytes, program.output_bytes) == (3 * tensor, tensor)
    # The temporaries are what our executor model says a Pallas TPU call holds in HBM: unpadded,
    # read in place, q's scaled copy and k and v laid out as [B, N, H*D] (3 x B*H*N*D*s), plus the
    # visit tables' few KiB; the softmax state stays in VMEM.
    modelled = dense_executor_temp_bytes(
        "b0",
        batch=2,
        heads=HEADS,
        tokens=TOKENS,
        head_dim=HEAD_DIM,
        dtype_bytes=2,
        block_q=SEED_TILES.block_q,
        block_kv=SEED_TILES.block_kv,
        backend="pallas_tpu",
    )
    assert modelled <= program.temp_bytes <= modelled + 128 * 1024, (program.temp_bytes, modelled)


def test_heads_leading_operands_hold_four_lane_padded_copies():
    """head_dim 64 is copied heads-leading: q, k, v and the output, each 64-wide row padded to a
    128-lane row, so twice what the element count says."""
    heads, head_dim = 10, 64
    plan = build_plan(BandMask(TOKENS, 4000, 1560), SEED_TILES, "b3", rounding_tolerance=None)
    qkv = jax.ShapeDtypeStruct((2, TOKENS, heads, head_dim), jnp.bfloat16)

    def call(q, k, v):
        return pallas_blocksparse_attention(q, k, v, plan, variant="b3")

    program = compile_for(topology_compiler("v6e:2x4").device, call, qkv, qkv, qkv)
    sizes = {"batch": 2, "heads": heads, "tokens": TOKENS, "head_dim": head_dim}
    modelled = dense_executor_temp_bytes("b0", **sizes, dtype_bytes=2, backend="pallas_tpu")
    assert modelled == 8 * 2 * TOKENS * heads * head_dim * 2
    assert modelled <= program.temp_bytes <= 1.005 * modelled, (program.temp_bytes, modelled)


def _verdict_line(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith("## Verdict"))


def _tiny_dry_run(
    tmp_path, vmem_limit_mib: int, mode: str, target: str = "tpu-v6e-1", *overrides: str
):
    cfg = small_config(
        tmp_path,
        "dry_run=true",
        f"target={target}",
        "kernel.block_q=512",
        "kernel.block_kv=512",
        f"kernel.vmem_limit_bytes={vmem_limit_mib * 2**20}",
        f"chip_compile={mode}",
        *overrides,
        small=False,
    )
    return dry_run(cfg)


def test_mosaic_refuses_tiles_over_its_vmem_limit_and_the_dry_run_says_so(tmp_path):
    # 512 x 512 tiles need about 2 MiB of scoped VMEM in Mosaic; 1 MiB is refused.
    code, report = _tiny_dry_run(tmp_path, 1, "step")
    assert code == 2, report
    verdict = report[report.index("## Verdict") :]
    line = next(ln for ln in verdict.splitlines() if "Mosaic ran out of scoped VMEM" in ln)
    assert "at a limit of 1.00MB" in line and "kernel.vmem_limit_bytes" in line
    # The refusal names a limit that Mosaic compiled, and the dry run takes it.
    fix = re.search(r"Checked with Mosaic: kernel\.vmem_limit_bytes=(\d+) compiles", line)
    assert fix, line
    code, report = _tiny_dry_run(tmp_path, int(fix.group(1)) // 2**20, "step")
    assert code == 0, report


@pytest.mark.parametrize("scan_layers", ["auto", "false"])
def test_the_whole_loop_is_compiled_on_the_eight_chip_mesh_with_its_all_to_all(
    tmp_path, scan_layers
):
    overrides = (f"model.scan_layers={scan_layers}",)
    code, report = _tiny_dry_run(tmp_path, 32, "step", "tpu-v6e-8", *overrides)
    assert code == 0, report
    assert "compiled for TPU v6 lite 2x4 by libtpu " in _verdict_line(report)
    assert "each arm's whole denoising loop (every layer, 8 chips on the sequence mesh" in report
    # A TPU scans the layers by default: the program holds one layer's body, unrolled every layer.
    layers = 1 if scan_layers == "auto" else get_transformer_config("tiny").num_layers
    # q, k and v to heads and the output back: four all-to-all per layer; the sparse arm's
    # program holds its dense branch's exchange and its sparse branch's.
    dense = re.search(r"dense: (\d+) all-to-all", report)
    sparse = re.search(r"sparse: (\d+) all-to-all", report)
    assert int(dense.group(1)) == 4 * layers, report
    assert int(sparse.group(1)) == 8 * layers, report
    assert "| denoising step (compiled) | denoise |" in report


def test_a_dry_run_compiled_for_the_chip_where_mosaic_overrules_our_budget_model(tmp_path):
    # Our model asks more than 4 MiB of VMEM for 512 x 512 tiles; Mosaic needs about 2 and
    # compiles: its verdict stands, and the report says our model disagreed.
    code, report = _tiny_dry_run(tmp_path, 4, "step")
    assert code == 0, report
    assert "compiled for TPU v6 lite 1x1 by libtpu " in _verdict_line(report)
    assert "Peak per device, the TPU compiler beside our model:" in report
    note = (
        r"our SMEM/VMEM model refused \(VMEM [0-9.]+ MiB > scoped limit 4\.0 MiB.*Mosaic's verdict"
    )
    assert re.search(note, report), report


def test_the_compile_refuses_an_environment_that_lets_libtpu_reach_out(monkeypatch):
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "0")
    assert "TPU_SKIP_MDS_QUERY" in unsafe_environment()
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    assert "JAX_PLATFORMS" in unsafe_environment()
