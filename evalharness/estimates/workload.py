"""How long a comparison takes on a device: seconds by component and arm.

``estimate_time`` turns the architecture's counts (``evalharness.estimates.flops``) into seconds
of one denoising step on one device of a ``DeviceTarget``, at the rates of
``evalharness.estimates.time_rates`` (each with its source):

- transformer matmuls: everything but self-attention, split over P devices, at the matmul rate,
  or the HBM roofline when that is slower (every weight once per forward, and each block's main
  buffers, 16 x [B, N / P, dim] + 2 x [B, N / P, ffn], read and written once);
- self-attention: dense calls at the dense executor's rate; sparse calls over the pairs the plan
  executes (visited tiles, masked work and padding included), at the variant's fraction of
  ideal; heads padded to a multiple of P count as computed;
- sparse overhead: routing, permutation and dispatch, linear in the call's q;
- exchange: the all-to-all (q, k, v and the output, [B, N / P, H_pad, D] each per layer) and, under
  "fsdp" on several devices, the weights gathered once per forward, at the interconnect's
  bandwidth, not overlapped with compute.

Runs per arm follow ``evalharness.run``: warm-up (the sparse arm's records its routing) +
``warm_runs`` timed runs (the noise floor too), every (prompt, seed) pair. The work outside the
loops is ``evalharness.estimates.run_time``'s (the estimate's ``once`` rows); compilation is in
neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from evalharness.estimates.flops import parameter_count, step_flops
from evalharness.estimates.targets import DeviceTarget
from evalharness.formatting import markdown_table
from kernels.parallel import padded_heads
from models.config import WanTransformerConfig
from models.dtypes import dtype_of
from models.video_geometry import VideoGeometry


@dataclass(frozen=True)
class TimeRates:
    """Rates of each kind of work on one device of a target, with their sources.

    Attributes:
        matmul_efficiency: fraction of peak the transformer's matmuls reach.
        attention_efficiency: fraction of peak the dense attention executor reaches.
        variant_efficiency: sparse variant -> its time over the ideal (dense time x executed
            pairs); a variant not listed runs at 1.0.
        sparse_overhead_s_per_element: seconds per q element (batch x token x head x head_dim on
            the device) of a sparse attention call beyond its kernel (routing, permutation and
            dispatch all move or score q, k and v once or a few times).
        interconnect_bytes_per_s: per-device bandwidth of the all-to-all and gathers (None:
            one device, nothing exchanged).
        sources: component -> where its rate comes from.
    """

    matmul_efficiency: float
    attention_efficiency: float
    variant_efficiency: Mapping[str, float]
    sparse_overhead_s_per_element: float
    interconnect_bytes_per_s: float | None
    sources: Mapping[str, str]


@dataclass(frozen=True)
class SparseWork:
    """What a sparse arm's schedule and plan execute.

    Attributes:
        cells: fraction of (step, layer) attention calls that are sparse.
        executed: pairs a sparse call computes, over N^2 (``TilePlan.executed_pairs_fraction``).
        variant: the sparse executor's variant (b0-b3).
    """

    cells: float
    executed: float
    variant: str


@dataclass(frozen=True)
class StepWork:
    """One denoising step's work on one device.

    Attributes:
        matmul_flops: the transformer without self-attention.
        attention_flops: self-attention if every call were dense (padded heads included).
        calls: attention calls per step (layers x forwards).
        qkv_elements: elements of q on the device after the exchange, summed over the step's
            calls (layers x samples x N x padded heads / P x head_dim).
        exchange_bytes: all-to-all bytes sent by the device.
        gather_bytes: weight bytes gathered by the device ("fsdp").
        hbm_bytes: bytes the matmul roofline reads and writes.
    """

    matmul_flops: float
    attention_flops: float
    calls: int
    qkv_elements: float
    exchange_bytes: float
    gather_bytes: float
    hbm_bytes: float


def step_work(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    *,
    guidance_batch: int,
    forwards: int,
    devices: int,
    param_dtype: str,
    dtype: str,
    gathers: bool,
) -> StepWork:
    """The work of one denoising step on one of ``devices`` (see the module docstring).

    Args:
        tcfg: transformer architecture.
        geometry: the video.
        guidance_batch: samples per step (2 with classifier-free guidance).
        forwards: model calls per step (2 with ``guidance_passes=separate``).
        devices: P.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        gathers: whether the weights are gathered per forward ("fsdp" on several devices).
    """
    p = devices
    act, weight = _itemsize("dtype", dtype), _itemsize("param_dtype", param_dtype)
    n = geometry.tokens
    n_dev = -(-n // p)
    heads = tcfg.num_attention_heads
    padded = padded_heads(heads, p)
    attention, total = step_flops(tcfg, n, guidance_batch)
    per_block = guidance_batch * n_dev * (16 * tcfg.dim + 2 * tcfg.ffn_dim) * act
    weights = parameter_count(tcfg) * weight
    away = (p - 1) / p
    tensor = guidance_batch * n_dev * padded * tcfg.attention_head_dim * act
    return StepWork(
        matmul_flops=(total - attention) / p,
        attention_flops=attention * padded / heads / p,
        calls=tcfg.num_layers * forwards,
        qkv_elements=tcfg.num_layers * guidance_batch * n * padded / p * tcfg.attention_head_dim,
        exchange_bytes=4 * tensor * away * tcfg.num_layers if p > 1 else 0.0,
        gather_bytes=weights * away * forwards if gathers and p > 1 else 0.0,
        hbm_bytes=weights * forwards + tcfg.num_layers * per_block,
    )


def _itemsize(key: str, name: str) -> int:
    """Bytes per element of the dtype named by config key ``key`` (errors name the key)."""
    try:
        return dtype_of(name).itemsize
    except ValueError as error:
        raise ValueError(f"{key}={str(name)!r}: {error}") from error


@dataclass(frozen=True)
class TimeEstimate:
    """Minutes per arm on a target, component by component.

    Attributes:
        assumption: the device figures used, in words.
        seconds: component -> arm -> seconds of one denoising step on one device.
        sources: component -> where its rate comes from.
        bound: arm -> "compute" or "memory": the matmuls' roofline side.
        runs: arm -> loop executions per pair (the warm-up, which records the routing, and the
            timed runs).
        steps: denoising steps per run.
        once: row -> column (an arm, or ``shared``) -> seconds of the run's work outside the
            loops, every pair included (``evalharness.estimates.run_time``; empty if not estimated).
        once_sources: row -> where its rate comes from.
        pairs: (prompt, seed) pairs; every pair runs every arm's loops.
    """

    assumption: str
    seconds: Mapping[str, Mapping[str, float]]
    sources: Mapping[str, str]
    bound: Mapping[str, str]
    runs: Mapping[str, int]
    steps: int
    once: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    once_sources: Mapping[str, str] = field(default_factory=dict)
    pairs: int = 1

    @property
    def step_seconds(self) -> dict[str, float]:
        """Arm -> seconds of one step (every component)."""
        return {arm: sum(row[arm] for row in self.seconds.values()) for arm in self.runs}

    def once_seconds(self, column: str) -> float:
        """Seconds of the work outside the loops charged to ``column`` (an arm or ``shared``)."""
        return sum(row.get(column, 0.0) for row in self.once.values())

    def _loops_seconds(self) -> dict[str, float]:
        """Arm -> seconds of all its loop runs, every pair."""
        step = self.step_seconds
        return {arm: self.pairs * self.steps * self.runs[arm] * step[arm] for arm in self.runs}

    @property
    def minutes(self) -> dict[str, float]:
        """Arm -> minutes of all its loop runs (every pair) and its own work outside them."""
        loops = self._loops_seconds()
        return {arm: (loops[arm] + self.once_seconds(arm)) / 60.0 for arm in self.runs}

    @property
    def shared_minutes(self) -> float:
        """Minutes of the work no one arm owns (loading, text encoding, the side-by-side)."""
        return self.once_seconds("shared") / 60.0

    @property
    def total_minutes(self) -> float:
        """Minutes of the whole run."""
        return sum(self.minutes.values()) + self.shared_minutes

    def loop_seconds(self, arm: str) -> float:
        """Seconds of one run of ``arm``'s denoising loop."""
        return self.steps * self.step_seconds[arm]

    def as_metrics(self) -> dict[str, float]:
        """``time.<component>.<arm>`` and ``time.<arm>.step_s`` seconds, ``time.<arm>.minutes``
        and ``time.total_minutes``."""
        out = {
            f"time.{_slug(c)}.{arm}": s for c, row in self.seconds.items() for arm, s in row.items()
        }
        out.update({f"time.{arm}.step_s": s for arm, s in self.step_seconds.items()})
        out.update({f"time.{arm}.minutes": m for arm, m in self.minutes.items()})
        out.update(
            {
                f"time.once.{_slug(row)}.{column}": s
                for row, by_column in self.once.items()
                for column, s in by_column.items()
                if s
            }
        )
        out["time.shared.minutes"] = self.shared_minutes
        out["time.total_minutes"] = self.total_minutes
        return out

    def to_markdown(self) -> str:
        """Components by arm (seconds per step), the step, runs and minutes; then the sources."""
        arms = list(self.runs)
        rows = [{"component": c, **row} for c, row in self.seconds.items()]
        rows.append({"component": "**step** (s)", **self.step_seconds})
        rows.append(
            {"component": "**loop** (s, one run)"} | {a: self.loop_seconds(a) for a in arms}
        )
        rows.append({"component": "runs per pair"} | {a: float(self.runs[a]) for a in arms})
        columns = [("component", "component", "{}")] + [(a, a, "{:,.2f}") for a in arms]
        bound = ", ".join(f"{a} {b}" for a, b in self.bound.items())
        notes = "".join(f"\n- {c}: {s}" for c, s in self.sources.items())
        loops = (
            markdown_table(rows, columns)
            + f"\n\nSeconds per denoising step per device on {self.assumption}. Matmuls bound "
            f"by: {bound}.{notes}"
        )
        return loops + "\n\n" + self._run_markdown()

    def _run_markdown(self) -> str:
        """The whole run by arm: loops (every pair), the work outside them, minutes."""
        arms = list(self.runs)
        rows = [{"row": "denoising loops", **self._loops_seconds(), "shared": 0.0}]
        rows += [{"row": name, **by_column} for name, by_column in self.once.items()]
        minutes = {**self.minutes, "shared": self.shared_minutes}
        rows.append({"row": "**minutes**", **minutes})
        columns = [("whole run (s)", "row", "{}")] + [(c, c, "{:,.1f}") for c in [*arms, "shared"]]
        notes = "".join(f"\n- {c}: {s}" for c, s in self.once_sources.items())
        pairs = f"{self.pairs} (prompt, seed) pairs, " if self.pairs > 1 else ""
        return (
            markdown_table(rows, columns)
            + f"\n\nSeconds of the whole run ({pairs}cold dense cache); total "
            f"{self.total_minutes:,.1f} min.{notes}"
        )


def _padding_source(tcfg: WanTransformerConfig, devices: int) -> dict[str, str]:
    """A note when the heads do not divide over the devices (their padding costs time)."""
    heads = tcfg.num_attention_heads
    padded = padded_heads(heads, devices)
    if padded == heads:
        return {}
    note = f"{heads} heads padded to {padded} for {devices} devices: self-attention and the "
    return {"heads": note + f"exchange count {padded} ({padded / heads - 1:+.0%})"}


def _slug(name: str) -> str:
    return "_".join(name.lower().replace("-", " ").split())


def _attention_seconds(
    work: StepWork, rates: TimeRates, peak: float, sparse: SparseWork | None
) -> tuple[dict[str, float], dict[str, float]]:
    """Each arm's self-attention and sparse-overhead seconds per step."""
    dense = work.attention_flops / (peak * rates.attention_efficiency)
    attention = dict.fromkeys(("dense", "noise_floor", "sparse"), dense)
    overhead = dict.fromkeys(attention, 0.0)
    if sparse is not None:
        call = sparse.executed / rates.variant_efficiency.get(sparse.variant, 1.0)
        attention["sparse"] = dense * ((1 - sparse.cells) + sparse.cells * call)
        overhead["sparse"] = sparse.cells * work.qkv_elements * rates.sparse_overhead_s_per_element
    return attention, overhead


def estimate_time(
    tcfg: WanTransformerConfig,
    geometry: VideoGeometry,
    target: DeviceTarget,
    *,
    steps: int,
    guidance_batch: int,
    warm_runs: int,
    noise_floor: bool,
    param_dtype: str,
    dtype: str,
    devices: int | None = None,
    sparse: SparseWork | None = None,
    forwards: int = 1,
    gathers: bool = False,
    rates: TimeRates,
    pairs: int = 1,
) -> TimeEstimate:
    """Minutes of each arm of a comparison on ``target``, by component (module docstring).

    Args:
        tcfg: transformer architecture.
        geometry: the video.
        target: the device (``evalharness.estimates.targets.get_target``).
        steps: denoising steps.
        guidance_batch: samples per step (2 with classifier-free guidance).
        warm_runs: timed runs of the dense and sparse arms.
        noise_floor: whether the noise-floor arm runs.
        param_dtype: parameter dtype name.
        dtype: compute dtype name.
        devices: P (default ``target.devices``).
        sparse: what the sparse arm executes (None: a dense schedule).
        forwards: model calls per step (2 with ``guidance_passes=separate``).
        gathers: weights gathered per forward ("fsdp": checkpoint models on several devices).
        rates: the rates of the target's work (``evalharness.estimates.time_rates.rates_for``).
        pairs: (prompt, seed) pairs; each runs every arm's loops.
    """
    p = devices or target.devices
    work = step_work(
        tcfg,
        geometry,
        param_dtype=param_dtype,
        dtype=dtype,
        guidance_batch=guidance_batch,
        forwards=forwards,
        devices=p,
        gathers=gathers,
    )
    peak = target.peak_flops[str(dtype)]
    matmuls, bound = roofline(
        work.matmul_flops,
        work.hbm_bytes,
        flops_per_s=peak * rates.matmul_efficiency,
        bytes_per_s=target.hbm_bytes_per_s,
    )
    link = rates.interconnect_bytes_per_s
    exchange = (work.exchange_bytes + work.gather_bytes) / link if link else 0.0
    attention, overhead = _attention_seconds(work, rates, peak, sparse)
    # Every arm's loop runs warm-up + timed runs; a sparse arm runs once more to record routing.
    arms = ("dense", "noise_floor", "sparse") if noise_floor else ("dense", "sparse")
    runs = {arm: warm_runs + 1 for arm in arms}  # the warm-up (the sparse one records) + timed
    seconds = {
        "transformer matmuls": dict.fromkeys(runs, matmuls),
        "self-attention": {arm: attention[arm] for arm in runs},
        "sparse overhead": {arm: overhead[arm] for arm in runs},
        "exchange": dict.fromkeys(runs, exchange),
    }
    return TimeEstimate(
        assumption=(
            f"{target.name}: {p} x {_flop_rate(peak)} {dtype} "
            f"peak, {target.hbm_bytes_per_s / 1e9:,.0f} GB/s HBM"
        ),
        seconds=seconds,
        sources={**rates.sources, **_padding_source(tcfg, p)},
        bound=dict.fromkeys(runs, bound),
        runs=runs,
        steps=steps,
        pairs=pairs,
    )


def roofline(
    flops: float, bytes_moved: float, *, flops_per_s: float, bytes_per_s: float
) -> tuple[float, str]:
    """Roofline time of work on one device: the slower of computing and moving its bytes.

    Args:
        flops: matmul FLOPs of the work on this device.
        bytes_moved: bytes read and written from device memory.
        flops_per_s: the sustained matmul rate (peak x the fraction reached).
        bytes_per_s: the device memory's bandwidth.

    Returns:
        (seconds, "compute" or "memory": which side of the roofline bounds it).
    """
    compute = flops / flops_per_s
    memory = bytes_moved / bytes_per_s
    return (compute, "compute") if compute >= memory else (memory, "memory")


def _flop_rate(flops_per_s: float) -> str:
    """A peak as TFLOP/s, or GFLOP/s below one TFLOP/s (a CPU's)."""
    if flops_per_s >= 1e12:
        return f"{flops_per_s / 1e12:,.0f} TFLOP/s"
    return f"{flops_per_s / 1e9:,.0f} GFLOP/s"
