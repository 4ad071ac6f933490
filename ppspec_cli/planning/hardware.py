"""The hardware table the predictor (planning/predict.py) reads: accelerators and links.

Every figure names its source. Accelerator figures are the vendors' datasheet peaks (dense, i.e.
without 2:4 sparsity); what a decode step achieves of them is the predictor's efficiency terms
(calibrated from bench records where one matches). Link bandwidths are per direction, as one
GPU sends to the next stage; link latencies are not datasheet figures (no vendor publishes an
end-to-end NCCL send/recv latency): they are the usual orders of magnitude of a small NCCL
point-to-point message on that fabric, stated as assumptions and overridable with flags
(`--link-bandwidth-gbps`, `--link-latency-us`). docs/predict.md has the same table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bandwidth_gbs: float  # GB/s (10^9 bytes/s), peak
    bf16_tflops: float  # dense bf16 tensor throughput, TFLOP/s (10^12)
    memory_gb: float
    intra_link: str  # the link TP all-reduces use inside a node (a LINKS key)
    source: str


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbs: float  # GB/s per direction
    latency_us: float  # one small message, end to end (assumption, see module docstring)
    source: str


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in (
        # NVIDIA H200 Tensor Core GPU datasheet (2024): 141 GB HBM3e, 4.8 TB/s; BF16 1,979 TFLOPS
        # "with sparsity" -> 989 dense; NVLink 900 GB/s.
        Accelerator(
            "h200",
            4800.0,
            989.0,
            141.0,
            "nvlink4",
            "NVIDIA H200 datasheet: 4.8 TB/s HBM3e, 1,979 TFLOPS bf16 with sparsity (989 dense)",
        ),
        # NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3, 3.35 TB/s; BF16 1,979 TFLOPS with sparsity.
        Accelerator(
            "h100",
            3350.0,
            989.0,
            80.0,
            "nvlink4",
            "NVIDIA H100 SXM datasheet: 3.35 TB/s HBM3, 1,979 TFLOPS bf16 with sparsity (989 dense)",
        ),
        # NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s HBM2e; BF16 312 TFLOPS (624 with sparsity); NVLink3 600 GB/s.
        Accelerator(
            "a100",
            2039.0,
            312.0,
            80.0,
            "nvlink3",
            "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e, 312 TFLOPS bf16 dense",
        ),
        # NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s; BF16 362.05 TFLOPS (733 with sparsity); PCIe gen4 x16, no
        # NVLink.
        Accelerator(
            "l40s", 864.0, 362.0, 48.0, "pcie4", "NVIDIA L40S datasheet: 864 GB/s GDDR6, 362 TFLOPS bf16 dense"
        ),
        # The CPU demo (profiles/tiny_cpu_demo*.yaml on a few shared cores): no datasheet; an
        # order-of-magnitude figure for two cores of a server CPU (a share of one socket's DDR
        # bandwidth; AVX-512 bf16 at a few hundred GFLOP/s). Only for the functional demo.
        Accelerator(
            "cpu", 20.0, 0.2, 16.0, "loopback", "assumption: two shared server-CPU cores (no datasheet; demo only)"
        ),
    )
}

#: One GPU's memory as the device reports it: what vLLM's `gpu_memory_utilization` multiplies
#: (`torch.accelerator.get_memory_info()`'s total, the memory model's budget: planning/memory.py), in
#: MiB. Measured where we had the card (torch's `total_memory` = nvidia-smi's total less its
#: `memory.reserved`); else nvidia-smi's total, which is up to ~0.5 GiB more than CUDA reports (the
#: H100's reserve is 480 MiB). A GPU not listed here is given as `NAME,mem=GiB` (`hardware:`).
DEVICE_MEMORY_MIB: dict[str, tuple[int, str]] = {
    "h100": (
        81079,
        "measured on an H100 80GB HBM3 (2026-12-07): torch total_memory 85,017,493,504 B = nvidia-smi 81,559 MiB less "
        "480 reserved",
    ),
    "h200": (
        143771,
        "nvidia-smi's total on an H200 (141 GB HBM3e; not measured here: CUDA reports up to ~0.5 GiB less)",
    ),
    "a100": (
        81920,
        "nvidia-smi's total on an A100 80GB (modal-labs/modal-client#2797; CUDA reports up to ~0.5 GiB less)",
    ),
    "l40s": (46068, "nvidia-smi's total on an L40S (modal-labs/modal-client#2797; CUDA reports up to ~0.5 GiB less)"),
}


def device_memory(name: str) -> tuple[int, str] | None:
    """(bytes, source) of one GPU's memory as the device reports it, or None when the table lacks it."""
    got = DEVICE_MEMORY_MIB.get(name.lower())
    return None if got is None else (got[0] << 20, got[1])


LINKS: dict[str, Link] = {
    lk.name: lk
    for lk in (
        # NVLink 4 (Hopper): 900 GB/s total per GPU = 450 GB/s per direction (H100/H200 datasheets).
        Link("nvlink4", 450.0, 5.0, "NVIDIA H100/H200 datasheets: NVLink 900 GB/s bidirectional per GPU"),
        # NVLink 5 (Blackwell): 1.8 TB/s per GPU = 900 GB/s per direction (B200 / GB200 datasheets).
        Link("nvlink5", 900.0, 5.0, "NVIDIA B200 datasheet: NVLink 1.8 TB/s bidirectional per GPU"),
        # NVLink 3 (Ampere): 600 GB/s per GPU = 300 GB/s per direction (A100 datasheet).
        Link("nvlink3", 300.0, 5.0, "NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional per GPU"),
        # PCIe: PCI-SIG base specs, 16 GT/s (gen4) / 32 GT/s (gen5) per lane, 128b/130b, x16.
        Link("pcie4", 31.5, 10.0, "PCI-SIG PCIe 4.0: 16 GT/s x16 = 31.5 GB/s per direction"),
        Link("pcie5", 63.0, 10.0, "PCI-SIG PCIe 5.0: 32 GT/s x16 = 63 GB/s per direction"),
        # InfiniBand: NVIDIA ConnectX-7 (NDR 400 Gb/s) and ConnectX-6 (HDR 200 Gb/s) datasheets.
        Link("ib-ndr", 50.0, 10.0, "NVIDIA ConnectX-7 datasheet: InfiniBand NDR 400 Gb/s"),
        Link("ib-hdr", 25.0, 10.0, "NVIDIA ConnectX-6 datasheet: InfiniBand HDR 200 Gb/s"),
        # Ethernet line rates (IEEE 802.3); NCCL's socket transport through the kernel's TCP stack:
        # tens of microseconds per message (assumption).
        Link("tcp-10g", 1.25, 50.0, "IEEE 802.3 10GBASE line rate 10 Gb/s; NCCL sockets"),
        Link("tcp-25g", 3.125, 50.0, "IEEE 802.3by 25GBASE line rate 25 Gb/s; NCCL sockets"),
        Link("tcp-100g", 12.5, 50.0, "IEEE 802.3 100GBASE line rate 100 Gb/s; NCCL sockets"),
        # Between processes of one host without an accelerator link (the CPU demo's gloo transport).
        Link("loopback", 5.0, 50.0, "assumption: shared-memory copy between processes on one host (demo only)"),
    )
}


def accelerator(name: str) -> Accelerator | None:
    return ACCELERATORS.get(name.lower())


def name_from_device(device: str | None) -> str | None:
    """The table's accelerator a measured device is (bench records `1 x NVIDIA H200`, or `cpu (...)`
    for the CPU platform): the entry whose name is a word of it, else None (not in the table)."""
    words = set(re.findall(r"[a-z0-9]+", (device or "").lower()))
    if (device or "").lower().startswith("cpu"):
        return "cpu"
    return next((n for n in ACCELERATORS if n != "cpu" and n in words), None)


def link(name: str) -> Link | None:
    return LINKS.get(name.lower())


def default_pp_link(acc: Accelerator, multi_node: bool) -> Link:
    """The link between pipeline stages when the user names none: the accelerator's own link
    inside a node; InfiniBand NDR across nodes (the common GPU-cluster fabric; an assumption,
    printed with the prediction)."""
    if multi_node and acc.name != "cpu":
        return LINKS["ib-ndr"]
    return LINKS[acc.intra_link]
