"""The errors rlcore raises on purpose (importable without torch, for tools that report them)."""

from __future__ import annotations

import errno

# A write that failed for want of room: no space, a quota, a file size limit (RLIMIT_FSIZE).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity; raised before any parameter is corrupted."""


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, corrupt, truncated or from another configuration."""


class CompileUnavailableError(RuntimeError):
    """`torch.compile` was asked for, but its backend (a C++ compiler, Triton) is missing."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class DistributedError(RuntimeError):
    """The ranks of a data-parallel run disagree, or the launch is inconsistent."""


class ConfigError(ValueError):
    """A configuration that validates on its own but does not fit the env or the run
    (e.g. SAC on a discrete action space); raised before any training step."""
