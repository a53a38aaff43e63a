"""The few in-place array calls a task's step makes, for numpy and for torch.

A task's step is a dozen small calls on [N]-sized arrays between two engine steps, so the
cost of each call, not its arithmetic, is what it adds to the engine's step. The CPU engine
(`mujoco.batch`) holds its state in numpy arrays, and numpy views of the rollout's CPU
storage are free (`StepSlot.host_views`). On them a numpy ufunc costs 1-2 us where the torch
call doing the same costs 4-8 us (TensorIterator setup; measured at N=64 between HalfCheetah
steps, whose memory traffic leaves the caches cold). The difference matters twice: the
longer MuJoCo's thread pool waits for the caller between steps, the slower its next step
(its worker sleeps: +2-10 us after a 30-40 us gap, +16-26 us after 50-60 us, measured). So
tasks write their step once, against `ArrayOps`, and run it on numpy arrays for the CPU
engine (`NumpyOps`, no copies: the same memory the torch views see) and on torch tensors for
MuJoCo Warp on CUDA (`TorchOps`, no host syncs).

Beyond these calls a task uses only what numpy arrays and torch tensors share: indexing,
slice assignment, arithmetic and comparison operators, `abs`, `.all(dim)`, `.sum(dims)`,
`.clip(lo, hi)`, `.reshape`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

Array = Any  # np.ndarray for NumpyOps, torch.Tensor for TorchOps


class ArrayOps(Protocol):
    """In-place calls on one kind of array (`NumpyOps` or `TorchOps`); `out` is written."""

    @staticmethod
    def as_array(tensor: torch.Tensor) -> Array:
        """`tensor` as this kind of array, sharing its memory."""
        ...

    @staticmethod
    def clamp(x: Array, low: Array, high: Array, out: Array) -> None: ...

    @staticmethod
    def sub(a: Array, b: Array, out: Array) -> None: ...

    @staticmethod
    def div(a: Array, divisor: float, out: Array) -> None: ...

    @staticmethod
    def copy(out: Array, src: Array) -> None:
        """`out[...] = src`, casting to `out`'s dtype."""
        ...

    @staticmethod
    def sum_squares(x: Array, out: Array) -> None:
        """Row sums of `x * x` ([N, k] -> [N])."""
        ...

    @staticmethod
    def add_scaled(out: Array, x: Array, alpha: float) -> None:
        """`out += alpha * x` (`x` may be bool)."""
        ...

    @staticmethod
    def logical_not(x: Array, out: Array) -> None: ...

    @staticmethod
    def fill(out: Array, value: float | bool) -> None: ...

    @staticmethod
    def isfinite(x: Array) -> Array: ...


class NumpyOps:
    """Host memory: the `mujoco.batch` engine and the rollout's CPU storage."""

    @staticmethod
    def as_array(tensor: torch.Tensor) -> np.ndarray:
        return tensor.numpy(force=tensor.requires_grad)

    @staticmethod
    def clamp(x: np.ndarray, low: np.ndarray, high: np.ndarray, out: np.ndarray) -> None:
        # Two ufuncs cost less than np.clip's Python-level dispatch.
        np.maximum(x, low, out=out)
        np.minimum(out, high, out=out)

    @staticmethod
    def sub(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.subtract(a, b, out=out)

    @staticmethod
    def div(a: np.ndarray, divisor: float, out: np.ndarray) -> None:
        np.divide(a, divisor, out=out)

    @staticmethod
    def copy(out: np.ndarray, src: np.ndarray) -> None:
        np.copyto(out, src, casting="same_kind")

    @staticmethod
    def sum_squares(x: np.ndarray, out: np.ndarray) -> None:
        np.vecdot(x, x, out=out)

    @staticmethod
    def add_scaled(out: np.ndarray, x: np.ndarray, alpha: float) -> None:
        np.add(out, np.multiply(x, alpha), out=out)

    @staticmethod
    def logical_not(x: np.ndarray, out: np.ndarray) -> None:
        np.logical_not(x, out=out)

    @staticmethod
    def fill(out: np.ndarray, value: float | bool) -> None:
        out.fill(value)

    @staticmethod
    def isfinite(x: np.ndarray) -> np.ndarray:
        return np.isfinite(x)


class TorchOps:
    """Tensors on any torch device (MuJoCo Warp's views): asynchronous, no host syncs."""

    @staticmethod
    def as_array(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @staticmethod
    def clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, out: torch.Tensor) -> None:
        torch.clamp(x, low, high, out=out)

    @staticmethod
    def sub(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.sub(a, b, out=out)

    @staticmethod
    def div(a: torch.Tensor, divisor: float, out: torch.Tensor) -> None:
        torch.div(a, divisor, out=out)

    @staticmethod
    def copy(out: torch.Tensor, src: torch.Tensor) -> None:
        out.copy_(src)

    @staticmethod
    def sum_squares(x: torch.Tensor, out: torch.Tensor) -> None:
        torch.linalg.vecdot(x, x, out=out)

    @staticmethod
    def add_scaled(out: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
        out.add_(x, alpha=alpha)

    @staticmethod
    def logical_not(x: torch.Tensor, out: torch.Tensor) -> None:
        torch.logical_not(x, out=out)

    @staticmethod
    def fill(out: torch.Tensor, value: float | bool) -> None:
        out.fill_(value)

    @staticmethod
    def isfinite(x: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(x)


__all__ = ["Array", "ArrayOps", "NumpyOps", "TorchOps"]
