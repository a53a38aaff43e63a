"""Process-level CPU settings for training runs (explicit calls; nothing happens on import)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_threshold_mb: int = 256) -> bool:
    """Make glibc keep freed blocks in the heap instead of returning them to the OS.

    A policy forward at N = 4096 allocates ~1 MB activations that glibc serves with fresh
    pages and unmaps on free; re-faulting them is a large share of a collection step on CPU
    (`getrusage` counts the minor faults). Raising the mmap and trim thresholds
    keeps those pages mapped for reuse. Returns False where this is not glibc Linux.
    """
    if not sys.platform.startswith("linux"):
        return False
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    if not hasattr(libc, "mallopt"):
        return False
    limit = mmap_threshold_mb * 1024 * 1024
    ok = libc.mallopt(_M_MMAP_THRESHOLD, limit) == 1
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, 2 * limit) == 1
    if not ok:
        log.warning("mallopt refused the allocator settings; continuing without them")
    return ok


def configure_cpu(threads: int = 1) -> None:
    """Pin torch's CPU thread count and keep freed memory mapped (see `keep_freed_memory`).

    One thread is the default because small-MLP training runs several times faster with
    one thread than with two, most of all on a busy machine: its ops are too small to
    split, and the threads wait on each other (benchmarks/README.md, *library_vs_stage*).
    """
    if threads <= 0:
        raise ValueError(f"threads must be a positive integer, got {threads}")
    torch.set_num_threads(threads)
    keep_freed_memory()


# Packages whose release changes a run's numbers: the kernels, the tensors, the envs' physics.
RESULT_PACKAGES = ("torch", "tensordict", "numpy", "gymnasium", "mujoco")


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_versions(names: Sequence[str] = RESULT_PACKAGES) -> dict[str, str]:
    """Installed releases of `names` (those not installed are left out)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def provenance(
    device: torch.device | str | None = None, packages: Sequence[str] = RESULT_PACKAGES
) -> dict[str, Any]:
    """What decides a run's bits besides its code and config: the CPU, the kernels torch
    picked for it (AVX512, AVX2, ...: their roundings differ in the last bit, and training
    amplifies that), the thread count, the GPU if any, and the package releases."""
    found: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
    }
    if device is not None and torch.device(device).type == "cuda":
        found["gpu"] = torch.cuda.get_device_name(torch.device(device))
    found["python"] = platform.python_version()
    found["packages"] = package_versions(packages)
    return found
