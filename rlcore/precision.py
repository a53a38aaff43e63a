"""Whether a device multiplies bfloat16 natively, for the algorithms' `precision: auto`.

CUDA devices say so themselves (`torch.cuda.is_bf16_supported`, Ampere and later). On CPU
the instruction sets decide: AVX512-BF16 or AMX-BF16 multiply bf16 faster than float32;
without them torch emulates bf16 and it is slower. Linux lists them in /proc/cpuinfo;
elsewhere the answer is no (float32 is never the wrong choice, only the slower one).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def native_bf16(device: torch.device) -> bool:
    """True where bf16 matrix products are faster than float32 ones on `device`."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return any(flag in _cpu_flags() for flag in CPU_BF16_FLAGS)
    return False


def trains_bf16(precision: str, device: torch.device) -> bool:
    """Whether a `precision` setting ("float32", "bfloat16", "auto") means bf16 on `device`."""
    return precision == "bfloat16" or (precision == "auto" and native_bf16(device))


def update_autocast(bf16: bool, device: torch.device) -> torch.autocast:
    """bf16 matrix products inside an update's losses where `bf16`, else a no-op context."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
