"""Whether a device computes in bfloat16 at speed, and the precision defaults that follow from it.

bf16 pays on a CPU only with native bf16 instructions (AVX512-BF16 or AMX-BF16): without them
torch emulates bf16 matrix products through fp32 and they run slower than fp32 itself. On CUDA it
pays from Ampere on (``torch.cuda.is_bf16_supported``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 arithmetic


@functools.cache
def cpu_has_fast_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU's flags (Linux ``/proc/cpuinfo``) name native bf16 arithmetic
    (:data:`CPU_BF16_FLAGS`); False elsewhere, and where the file cannot be read (macOS, Windows)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return any(flag in flags for flag in CPU_BF16_FLAGS)


def has_fast_bf16(device_type: str) -> bool:
    """Whether ``device_type`` (``"cpu"``, ``"cuda"``, ...) computes in bf16 faster than in fp32."""
    if device_type == "cpu":
        return cpu_has_fast_bf16()
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return False


def cpu_trainer_precision() -> str:
    """The CPU trainer's default Lightning precision (``${cpu_precision:}`` in
    ``configs/trainer/cpu.yaml``): ``"bf16-mixed"`` (bf16 autocast, fp32 master weights and
    optimizer state) where the CPU has native bf16, else ``"32-true"``."""
    return "bf16-mixed" if cpu_has_fast_bf16() else "32-true"
