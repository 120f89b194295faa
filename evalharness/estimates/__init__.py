"""Estimates before anything runs: the device targets, what a comparison computes and how long it
takes (FLOPs, roofline), and the per-device memory table (compiled block, attention
temporaries, routing and exchange buffers).
"""

from evalharness.estimates.attention_memory import ExecutorSpec, attention_shape
from evalharness.estimates.block_memory import compiled_temp_bytes
from evalharness.estimates.flops import FlopCount, count_flops, parameter_count, step_flops
from evalharness.estimates.gpu_compiler import gpu_topology_compiler
from evalharness.estimates.host_memory import HostMemory, size_host
from evalharness.estimates.memory_estimate import estimate_memory
from evalharness.estimates.memory_table import GIB, MemoryTable, add_runtime_overhead
from evalharness.estimates.phase_estimate import (
    SHIPPED,
    JobEstimate,
    JobKey,
    JobWork,
    MeasuredJob,
    PhaseEstimate,
    estimate_job,
    flop_model_phases,
    load_history,
    record_job,
)
from evalharness.estimates.run_time import (
    HOST_NS_PER_PIXEL,
    VAE_EFFICIENCY,
    RunWork,
    run_rows,
    run_work,
)
from evalharness.estimates.seed_comparison import (
    CONTRADICTION,
    SEED_RESOLUTIONS,
    SEED_TARGET,
    in_seed_setting,
    seed_prediction,
    seed_row,
    seed_table,
)
from evalharness.estimates.seed_measurements import (
    SEED_ATTENTION_SHARE,
    SEED_DENSE_LOOP_S,
    SEED_KERNEL_MS,
    SEED_SETUP,
    SEED_SPARSE_LOOP_S,
    SEED_SPEEDUP,
)
from evalharness.estimates.targets import (
    CPU_RUNTIME_OVERHEAD,
    DeviceTarget,
    device_memory_bytes,
    get_target,
    host_target,
    measure_matmul_flops,
)
from evalharness.estimates.time_rates import rates_for, tpu_generation
from evalharness.estimates.tpu_compiler import (
    CompiledProgram,
    TpuCompiler,
    TpuCompilerUnavailable,
    compile_for,
    compile_program,
    compiler_reason,
    on_device,
    scoped_vmem_shortfall,
    topology_compiler,
)
from evalharness.estimates.workload import SparseWork, TimeEstimate, estimate_time

__all__ = [
    "SHIPPED",
    "JobEstimate",
    "JobKey",
    "JobWork",
    "MeasuredJob",
    "PhaseEstimate",
    "estimate_job",
    "flop_model_phases",
    "load_history",
    "record_job",
    "CONTRADICTION",
    "HOST_NS_PER_PIXEL",
    "RunWork",
    "SEED_RESOLUTIONS",
    "SEED_TARGET",
    "VAE_EFFICIENCY",
    "in_seed_setting",
    "run_rows",
    "run_work",
    "seed_prediction",
    "seed_row",
    "seed_table",
    "CompiledProgram",
    "CPU_RUNTIME_OVERHEAD",
    "DeviceTarget",
    "ExecutorSpec",
    "GIB",
    "HostMemory",
    "MemoryTable",
    "SEED_ATTENTION_SHARE",
    "SEED_DENSE_LOOP_S",
    "SEED_KERNEL_MS",
    "SEED_SETUP",
    "SEED_SPARSE_LOOP_S",
    "SEED_SPEEDUP",
    "FlopCount",
    "SparseWork",
    "TimeEstimate",
    "TpuCompiler",
    "TpuCompilerUnavailable",
    "add_runtime_overhead",
    "attention_shape",
    "compile_for",
    "compile_program",
    "count_flops",
    "compiled_temp_bytes",
    "compiler_reason",
    "device_memory_bytes",
    "estimate_memory",
    "size_host",
    "estimate_time",
    "get_target",
    "gpu_topology_compiler",
    "host_target",
    "measure_matmul_flops",
    "parameter_count",
    "on_device",
    "rates_for",
    "tpu_generation",
    "scoped_vmem_shortfall",
    "step_flops",
    "topology_compiler",
]
