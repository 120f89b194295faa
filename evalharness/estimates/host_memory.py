"""The host's memory during a run on an accelerator, checked against the target host's RAM.

On a TPU or a GPU the host holds only what passes through it, in two phases:

- loading: the readers stream tensor by tensor (``models.loading.load_transformer``'s second pass,
  ``models.safetensors_reader.iter_tensors``): one tensor as stored and its cast copy, so two
  copies of the largest tensor, stored as float32 when the dtype is not known (a dry run);
- videos: every arm's decoded uint8 frames, the side-by-side video (three panels wide) and one
  arm's float32 frames in flight from the VAE; quality is measured a frame at a time
  (``evalharness.evidence.quality``), which adds a few frames.

On a CPU the host is the device, and the memory table already is the host's.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalharness.estimates.targets import GIB
from models.config import WanTransformerConfig
from models.text_encoder import UMT5Config
from models.video_geometry import VideoGeometry

# Documented host RAM per target, with the document it comes from. Targets absent here are not
# checked (the host of a one-chip v6e VM or of one H200 depends on the machine type chosen).
HOST_RAM: dict[str, tuple[int, str]] = {
    "tpu-v6e-8": (
        1536 * GIB,
        "Google Cloud TPU v6e documentation (docs.cloud.google.com/tpu/docs/v6e, system "
        "architecture): DRAM per host 1536 GiB, 8 chips per host",
    ),
}
STORED_BYTES = 4  # float32 storage assumed when the checkpoint's dtype is unknown


@dataclass(frozen=True)
class HostMemory:
    """The host's peak per phase of a run on an accelerator, and the RAM it is checked against.

    Attributes:
        loading_bytes: two copies of the largest stored tensor (read, then cast).
        largest_tensor: which tensor that is.
        videos_bytes: decoded frames of every arm, the side-by-side video and one arm's float32
            decode in flight.
        host_ram_bytes: the target host's documented RAM, or None when not documented here.
        source: where ``host_ram_bytes`` comes from (or why it is unknown).
    """

    loading_bytes: int
    largest_tensor: str
    videos_bytes: int
    host_ram_bytes: int | None
    source: str

    @property
    def peak_bytes(self) -> int:
        """The larger phase: loading ends before the videos exist."""
        return max(self.loading_bytes, self.videos_bytes)

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits the host's RAM (None when the RAM is not documented)."""
        return None if self.host_ram_bytes is None else self.peak_bytes <= self.host_ram_bytes

    def problem(self) -> str | None:
        """One line when the peak exceeds the host's RAM, else None."""
        if self.fits is not False:
            return None
        return (
            f"host memory: the run peaks at {self.peak_bytes / GIB:,.1f} GiB on the host, more "
            f"than the {self.host_ram_bytes / GIB:,.0f} GiB of its documented RAM ({self.source})"
        )

    def to_markdown(self) -> str:
        """The two phases and the verdict as Markdown."""
        ram = (
            "not documented" if self.host_ram_bytes is None else f"{self.host_ram_bytes / GIB:,.0f}"
        )
        verdict = {None: "not checked", True: "fits", False: "DOES NOT FIT"}[self.fits]
        return "\n".join(
            [
                "| host phase | GiB | what |",
                "|---|---|---|",
                f"| loading | {self.loading_bytes / GIB:,.2f} | two copies of {self.largest_tensor} |",
                f"| videos | {self.videos_bytes / GIB:,.2f} | decoded frames of every arm, the "
                "side-by-side video, one float32 decode |",
                f"| **peak** vs host RAM | {self.peak_bytes / GIB:,.2f} of {ram} | {verdict} |",
                "",
                f"Host RAM: {self.source}.",
            ]
        )


def largest_tensor(tcfg: WanTransformerConfig, text: UMT5Config) -> tuple[str, int]:
    """The largest tensor any reader streams, as ``(name, elements)``: the text encoder's token
    embedding, or the transformer's largest matrix (the FFN's or the text projection's)."""
    dim = tcfg.num_attention_heads * tcfg.attention_head_dim
    candidates = {
        "the text encoder's token embedding": text.vocab_size * text.d_model,
        "the text encoder's FFN matrix": text.d_ff * text.d_model,
        "the transformer's FFN matrix": tcfg.ffn_dim * dim,
        "the transformer's text projection": tcfg.text_dim * dim,
        "a transformer attention matrix": dim * dim,
    }
    name = max(candidates, key=candidates.get)
    return name, candidates[name]


def videos_bytes(video: VideoGeometry, arms: int) -> int:
    """Host bytes of the videos: ``arms`` uint8 videos, the side-by-side one (three panels) and
    one float32 decode."""
    frame = video.frames * video.height * video.width * 3
    return arms * frame + 3 * frame + 4 * frame


def size_host(
    target_name: str,
    tcfg: WanTransformerConfig,
    text: UMT5Config,
    video: VideoGeometry,
    *,
    arms: int,
    reads_checkpoint: bool,
) -> HostMemory:
    """The host's peak of a run of ``arms`` arms on ``target_name``.

    Args:
        target_name: a ``DeviceTarget`` name.
        tcfg: the transformer.
        text: the text encoder's config.
        video: the run's video.
        arms: decoded videos the run holds (dense, sparse, and the noise floor when measured).
        reads_checkpoint: False for seeded weights (nothing is read; the loading phase is the
            weights' initialisation on the devices, nothing on the host).
    """
    name, elements = largest_tensor(tcfg, text)
    loading = 2 * elements * STORED_BYTES if reads_checkpoint else 0
    ram, source = HOST_RAM.get(
        target_name, (None, f"the host RAM of {target_name} is not documented here; not checked")
    )
    return HostMemory(loading, name, videos_bytes(video, arms), ram, source)
