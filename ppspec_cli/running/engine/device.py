"""What an engine runs on, for a measurement's identity (`ppspec bench` records it with every
result): the GPUs' count and name as torch sees them, else the CPU's architecture and core count.
Imports torch (already imported with vLLM where it is called: bench's load generator)."""

from __future__ import annotations

import os
import platform


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - no usable torch: the identity says "cpu"
        pass
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"
