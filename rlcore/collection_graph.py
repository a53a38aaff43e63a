"""A rollout's T collection steps replayed as one CUDA graph (`runtime.compile` on CUDA).

On a GPU one collection step of a small policy and a builtin env is about a hundred tiny
kernels, each launched from Python: up to tens of thousands of envs, the GPU waits on the
launches, not on the work (issue P19: the collector at 0.65-0.77 of the ideal on an H100).
The steps touch only storage that outlives them (the rollout, the env's state buffers,
the policy's parameters and normaliser, the generators' states), all updated in place, so
after one eager run the T steps are captured once and every later rollout is one replay.
The generators are registered with the graph: a replay draws what the eager steps would
have drawn from their current states.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rlcore.envs.base import BatchedEnv


def graph_refusal(env: BatchedEnv, host_checks: bool, grouped: bool) -> str | None:
    """Why a collector's steps over `env` cannot be one CUDA graph, or None if they can."""
    if env.device.type != "cuda":
        return f"the env runs on {env.device.type}, not CUDA"
    if env.graph_generators() is None:
        return f"{type(env).__name__}'s step cannot be captured (host work or its own graphs)"
    if host_checks:
        return "the collector reads the device (host checks on)"
    if grouped:  # a group restart is a host check; the rest is not yet run on a GPU
        return "grouped episodes (GRPO) collect eagerly"
    return None


class CollectionGraph:
    """Runs `steps` eagerly once, then as a CUDA graph captured right after that run."""

    def __init__(
        self, steps: Callable[[], None], generators: Sequence[torch.Generator], device: torch.device
    ) -> None:
        self._steps, self._generators, self._device = steps, tuple(generators), device
        self._graph: torch.cuda.CUDAGraph | None = None

    @property
    def captured(self) -> bool:
        """Whether the steps have been captured (every call from the second on replays)."""
        return self._graph is not None

    def __call__(self) -> None:
        """Run the steps: eagerly then captured on the first call, replayed after."""
        if self._graph is None:
            self._graph = self._run_and_capture()
        else:
            self._graph.replay()

    def _run_and_capture(self) -> torch.cuda.CUDAGraph:
        """The first call: the real steps, eagerly, on a side stream (so the lazy set-up
        that capture cannot do, such as library workspaces, happens on the stream that will
        capture), then the capture (which records the steps without running them)."""
        entry = torch.cuda.current_stream(self._device)
        stream = torch.cuda.Stream(self._device)
        stream.wait_stream(entry)
        with torch.cuda.stream(stream):
            self._steps()
        entry.wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        for generator in self._generators:
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph, stream=stream):
            self._steps()
        return graph
