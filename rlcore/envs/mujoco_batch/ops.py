"""The few in-place array calls a task's step makes, for numpy and for torch.

A task's step is a dozen small calls on [N]-sized arrays between two engine steps, so the
cost of each call, not its arithmetic, is what it adds to the engine's step. The CPU engine
(`mujoco.batch`) holds its state in numpy arrays, and numpy views of the rollout's CPU
storage are free (`StepSlot.host_views`). On them a numpy ufunc costs a fraction of the
torch call doing the same (TensorIterator's setup, with the caches cold from the engine's
step). The difference matters twice: the longer MuJoCo's thread pool waits for the caller
between steps, the slower its next step (its workers go to sleep). Figures:
benchmarks/README.md, *mujoco_batch*. So tasks write their step
once, against `ArrayOps`, and run it on numpy arrays for the CPU engine (`NumpyOps`, no
copies: the same memory the torch views see) and on torch tensors for MuJoCo Warp on CUDA
(`TorchOps`, no host syncs).

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
    def clamp(x: Array, low: Array, high: Array, out: Array) -> None:
        """`out = min(max(x, low), high)` elementwise (actions into the control range)."""
        ...

    @staticmethod
    def sub(a: Array, b: Array, out: Array) -> None:
        """`out = a - b`."""
        ...

    @staticmethod
    def div(a: Array, divisor: float, out: Array) -> None:
        """`out = a / divisor`."""
        ...

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
    def logical_not(x: Array, out: Array) -> None:
        """`out = not x`, elementwise on bool arrays."""
        ...

    @staticmethod
    def fill(out: Array, value: float | bool) -> None:
        """Set every element of `out` to `value`."""
        ...

    @staticmethod
    def isfinite(x: Array) -> Array:
        """A new bool array, true where `x` is finite (the one call that allocates)."""
        ...


class NumpyOps:
    """Host memory: the `mujoco.batch` engine and the rollout's CPU storage."""

    @staticmethod
    def as_array(tensor: torch.Tensor) -> np.ndarray:
        """The CPU tensor's numpy view, sharing its memory."""
        return tensor.numpy(force=tensor.requires_grad)

    @staticmethod
    def clamp(x: np.ndarray, low: np.ndarray, high: np.ndarray, out: np.ndarray) -> None:
        """`ArrayOps.clamp` as two ufuncs, which cost less than `np.clip`'s dispatch."""
        np.maximum(x, low, out=out)
        np.minimum(out, high, out=out)

    @staticmethod
    def sub(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """`ArrayOps.sub` as one `np.subtract` ufunc."""
        np.subtract(a, b, out=out)

    @staticmethod
    def div(a: np.ndarray, divisor: float, out: np.ndarray) -> None:
        """`ArrayOps.div` as one `np.divide` ufunc."""
        np.divide(a, divisor, out=out)

    @staticmethod
    def copy(out: np.ndarray, src: np.ndarray) -> None:
        """`ArrayOps.copy` through `np.copyto` (float64 state into float32 observations)."""
        np.copyto(out, src, casting="same_kind")

    @staticmethod
    def sum_squares(x: np.ndarray, out: np.ndarray) -> None:
        """`ArrayOps.sum_squares` as one `np.vecdot` of each row with itself."""
        np.vecdot(x, x, out=out)

    @staticmethod
    def add_scaled(out: np.ndarray, x: np.ndarray, alpha: float) -> None:
        """`ArrayOps.add_scaled`; the product is a temporary (numpy has no fused add)."""
        np.add(out, np.multiply(x, alpha), out=out)

    @staticmethod
    def logical_not(x: np.ndarray, out: np.ndarray) -> None:
        """`ArrayOps.logical_not` as one `np.logical_not` ufunc."""
        np.logical_not(x, out=out)

    @staticmethod
    def fill(out: np.ndarray, value: float | bool) -> None:
        """`ArrayOps.fill` through `ndarray.fill`."""
        out.fill(value)

    @staticmethod
    def isfinite(x: np.ndarray) -> np.ndarray:
        """`ArrayOps.isfinite` through `np.isfinite`."""
        return np.isfinite(x)


class TorchOps:
    """Tensors on any torch device (MuJoCo Warp's views): asynchronous, no host syncs."""

    @staticmethod
    def as_array(tensor: torch.Tensor) -> torch.Tensor:
        """The tensor itself: torch ops run on it where it lives."""
        return tensor

    @staticmethod
    def clamp(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, out: torch.Tensor) -> None:
        """`ArrayOps.clamp` as one `torch.clamp` kernel."""
        torch.clamp(x, low, high, out=out)

    @staticmethod
    def sub(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """`ArrayOps.sub` as one `torch.sub` kernel."""
        torch.sub(a, b, out=out)

    @staticmethod
    def div(a: torch.Tensor, divisor: float, out: torch.Tensor) -> None:
        """`ArrayOps.div` as one `torch.div` kernel."""
        torch.div(a, divisor, out=out)

    @staticmethod
    def copy(out: torch.Tensor, src: torch.Tensor) -> None:
        """`ArrayOps.copy` through `Tensor.copy_` (which casts)."""
        out.copy_(src)

    @staticmethod
    def sum_squares(x: torch.Tensor, out: torch.Tensor) -> None:
        """`ArrayOps.sum_squares` as one `torch.linalg.vecdot` of each row with itself."""
        torch.linalg.vecdot(x, x, out=out)

    @staticmethod
    def add_scaled(out: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
        """`ArrayOps.add_scaled` as one fused `add_(x, alpha=...)`."""
        out.add_(x, alpha=alpha)

    @staticmethod
    def logical_not(x: torch.Tensor, out: torch.Tensor) -> None:
        """`ArrayOps.logical_not` as one `torch.logical_not` kernel."""
        torch.logical_not(x, out=out)

    @staticmethod
    def fill(out: torch.Tensor, value: float | bool) -> None:
        """`ArrayOps.fill` through `Tensor.fill_`."""
        out.fill_(value)

    @staticmethod
    def isfinite(x: torch.Tensor) -> torch.Tensor:
        """`ArrayOps.isfinite` through `torch.isfinite`."""
        return torch.isfinite(x)


__all__ = ["Array", "ArrayOps", "NumpyOps", "TorchOps"]
