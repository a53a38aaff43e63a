"""An on-policy minibatch step that never reads the device: `runtime.compile`'s fast path.

One minibatch step (gather from the rollout, advantage normalisation, loss, backward,
gradient clipping, Adam) runs compiled: on CPU as one function (the gradients by
`torch.func`), on CUDA as two, the loss (whose backward AOTAutograd compiles too) and the
update, captured together as a CUDA graph. Everything that steers a step is kept on the
device: the learning rate, Adam's step count, the minibatch statistics and a flag that
turns the remaining steps of an update into no-ops. That flag is what makes early
stopping on KL (`target_kl`) and the stop at a non-finite loss work without a host read:
once it drops, later steps leave parameters, moments and statistics as they are.
On CUDA the step is also captured once per minibatch size as a CUDA graph and replayed:
the graph reads the rollout's own storage and a static index buffer, so a replay is
the whole step in one launch.

Why: a PPO step on the small networks of control tasks is hundreds of tiny kernels and
a host sync per minibatch (the finite check, the KL check); on a GPU that, not arithmetic,
bounds training (benchmarks/README.md, *fused_step*, *sync_sites*).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.algos.compile import compiled
from rlcore.algos.minibatch import epoch_indices, selected_rows
from rlcore.algos.sgd import FlatGradients
from rlcore.rollout import (
    ACTION,
    ADVANTAGE,
    OBS,
    SAMPLE_LOG_PROB,
    VALUE,
    VALUE_TARGET,
    num_steps,
)

LossTerms = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""`(obs, *fields) -> (loss, stats)`, the fields the rollout's keys `WholeStep.fields` in
order (PPO's: action, old log-probability, old value, value target, advantage)."""

PPO_FIELDS = (ACTION, SAMPLE_LOG_PROB, VALUE, VALUE_TARGET, ADVANTAGE)

ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which the eager path uses


class DeviceAdam:
    """Adam over one flat buffer per moment, with the rate, the step count and an
    enable flag as device tensors, so no step reads the host and a schedule changes data,
    not compiled code.

    The arithmetic is `torch.optim.Adam`'s (equal to float rounding); its state converts
    to and from that optimizer's, so checkpoints of either path resume in the other.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], lr: float, eps: float) -> None:
        self.params = list(params)
        first = self.params[0]
        self.sizes = [p.numel() for p in self.params]
        total = sum(self.sizes)
        self.eps = eps
        self.exp_avg = torch.zeros(total, dtype=first.dtype, device=first.device)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        # Each parameter's slice of the moments: a step reads and writes them in place,
        # parameter by parameter, with no flat copy of the gradient.
        self._exp_avgs = list(self.exp_avg.split(self.sizes))
        self._exp_avg_sqs = list(self.exp_avg_sq.split(self.sizes))
        self.step_count = torch.zeros((), dtype=torch.float32, device=first.device)
        self.lr = torch.tensor(lr, dtype=torch.float32, device=first.device)

    @torch.no_grad()
    def apply(self, grad: torch.Tensor | Sequence[torch.Tensor], enabled: torch.Tensor) -> None:
        """One Adam step where `enabled` (0-d bool), else none, from the gradient: flat
        (the parameters' in order), or one tensor per parameter."""
        beta1, beta2 = ADAM_BETAS
        grads = grad.split(self.sizes) if isinstance(grad, torch.Tensor) else grad
        self.step_count.add_(enabled.to(self.step_count.dtype))
        step = self.step_count.clamp(min=1.0)
        # beta ** step written as exp(step * log(beta)): Inductor's CPU code computes a
        # pow inside every vector iteration of the loops that read it (a libm call that
        # keeps errno, so the C++ compiler cannot hoist it: ~2x the step's time), where
        # an exp is computed once into a buffer. Equal to float rounding.
        bias1 = 1.0 - torch.exp(step * math.log(beta1))
        bias2_sqrt = (1.0 - torch.exp(step * math.log(beta2))).sqrt()
        step_size = self.lr / bias1
        moments = zip(self.params, grads, self._exp_avgs, self._exp_avg_sqs, strict=True)
        for param, g, exp_avg, exp_avg_sq in moments:
            g = g.reshape(-1)
            m = torch.where(enabled, torch.lerp(exp_avg, g, 1.0 - beta1), exp_avg)
            v = torch.where(enabled, exp_avg_sq * beta2 + g * g * (1.0 - beta2), exp_avg_sq)
            exp_avg.copy_(m)
            exp_avg_sq.copy_(v)
            update = m / (v.sqrt() / bias2_sqrt + self.eps) * step_size
            param.sub_(torch.where(enabled, update, torch.zeros_like(update)).view_as(param))

    def state_tensors(self) -> list[torch.Tensor]:
        """Everything a step changes besides the parameters (for snapshots)."""
        return [self.exp_avg, self.exp_avg_sq, self.step_count]

    @torch.no_grad()
    def write_into(self, adam: torch.optim.Adam) -> None:
        """Give `adam` this state, in its own per-parameter format (for checkpoints)."""
        if float(self.step_count) == 0:  # nothing stepped yet: as a fresh torch Adam
            adam.state.clear()
            return
        m = self.exp_avg.split(self.sizes)
        v = self.exp_avg_sq.split(self.sizes)
        for param, m_part, v_part in zip(self.params, m, v, strict=True):
            adam.state[param] = {
                "step": self.step_count.clone(),
                "exp_avg": m_part.view_as(param).clone(),
                "exp_avg_sq": v_part.view_as(param).clone(),
            }

    @torch.no_grad()
    def read_from(self, adam: torch.optim.Adam) -> None:
        """Take `adam`'s state (a fresh optimizer's: zero moments, no steps)."""
        states = [adam.state.get(p, {}) for p in self.params]
        if not any(states):
            for tensor in self.state_tensors():
                tensor.zero_()
            return
        self.step_count.fill_(float(states[0]["step"]))
        for name, flat in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            parts = flat.split(self.sizes)
            for part, state in zip(parts, states, strict=True):
                part.copy_(state[name].reshape(-1))


class WholeStep:
    """The minibatch steps of one on-policy update, compiled, with their statistics and
    stop flag on the device.

    Call `run_epochs` once per update (or `begin(rollout)`, then `step(indices)` per
    minibatch: indices into the [N, T] transitions in env-major order, as
    `rlcore.algos.minibatch` draws them), then read `sums` (per-statistic sums over the
    steps taken) and `count` (steps taken). The loss reads the observations and the
    rollout's keys `fields`, in order; `advantage` among them is normalised over the
    minibatch where `normalize_advantage`.
    A step that meets a non-finite loss or gradient is counted (its NaN statistics make
    the update's reported losses NaN, which the trainer turns into an error at its next
    host read) but not applied, and disables the rest, as does a KL above
    1.5 x `target_kl` after its step (the eager path's rule).
    """

    def __init__(
        self,
        loss_terms: LossTerms,
        adam: DeviceAdam,
        grads: FlatGradients,
        num_stats: int,
        normalize_advantage: bool,
        max_grad_norm: float | None,
        target_kl: float | None,
        kl_index: int,
        graphs: bool,
        fields: Sequence[str] = PPO_FIELDS,
        module: torch.nn.Module | None = None,
    ) -> None:
        self.loss_terms, self.adam, self.grads, self.fields = loss_terms, adam, grads, fields
        self.normalize_advantage, self.max_grad_norm = normalize_advantage, max_grad_norm
        self.target_kl, self.kl_index = target_kl, kl_index
        device = adam.exp_avg.device
        self.sums = torch.zeros(num_stats, device=device)
        self.count = torch.zeros((), device=device)
        self.active = torch.ones((), dtype=torch.bool, device=device)
        # Shapes start static; a process that trains a second size (a search's trials)
        # compiles one graph with dynamic sizes that serves every later size, rather than
        # one graph per size until torch's recompile limit silently leaves them eager.
        self._forward = compiled(self._forward_eager)
        self._update = compiled(self._update_eager)
        # On CPU, given the module whose parameters Adam steps (`module`: the policy the
        # loss reads), the step is one compiled function instead: the gradients by
        # `torch.func` (forward and backward in one graph, no autograd engine call between
        # two), then clipping and Adam. At the small networks' minibatch sizes the calls
        # between the two functions were most of the step (benchmarks/README.md,
        # *fused_step*). On CUDA the step is captured as one graph instead.
        self.one_function = device.type == "cpu" and module is not None
        if self.one_function:
            assert module is not None
            named = dict(module.named_parameters())
            owned = list(named.values())
            if len(owned) != len(adam.params) or any(
                mine is not stepped for mine, stepped in zip(owned, adam.params, strict=False)
            ):
                raise ValueError("WholeStep's module must own exactly the parameters Adam steps")
            self._holder = _LossModule(module, self._forward_eager)
            self._names = [f"module.{name}" for name in named]
            self._one = compiled(self._one_eager)
        self.graphs_wanted = graphs and device.type == "cuda"
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._bound: tuple[int, ...] | None = None
        self._sources: dict[str, torch.Tensor] = {}
        self._obs: dict[str, torch.Tensor] = {}
        # (N, T) of the bound rollout, as device tensors: data, not constants of the graph.
        self._num_envs = torch.zeros((), dtype=torch.long, device=device)
        self._horizon = torch.ones((), dtype=torch.long, device=device)

    def run_epochs(
        self,
        rollout: TensorDict,
        where: torch.Tensor | None,
        num_epochs: int,
        num_minibatches: int,
        generator: torch.Generator,
    ) -> None:
        """One update's steps: `rlcore.algos.minibatch.epoch_minibatches`' minibatches
        from the same draws, over the transitions `where` selects (all if None: then
        nothing is read from the device; else the selection once per update).

        Shape:
            where: [N, T] bool, over `transition_view(rollout)`
        """
        self.begin(rollout)
        num_envs, horizon = rollout.batch_size[0], num_steps(rollout)
        total, device = num_envs * horizon, self.count.device
        selected = None if where is None else selected_rows(where)
        count = total if selected is None else selected.numel()
        for _ in range(num_epochs if count and num_minibatches else 0):
            if num_minibatches == 1:  # storage order, no draw (as `epoch_minibatches`)
                self.step(torch.arange(total, device=device) if selected is None else selected)
                continue
            for indices in epoch_indices(total, selected, num_minibatches, generator, device):
                self.step(indices)

    def begin(self, rollout: TensorDict) -> None:
        """Start an update on `rollout` (the same storage every update: graphs stay valid)."""
        self._bind(rollout)
        self.sums.zero_()
        self.count.zero_()
        self.active.fill_(True)

    def _bind(self, rollout: TensorDict) -> None:
        """Flat [(T + 1) * N, ...] views of the fields the loss reads (the rollout is
        time-major in memory, so these are views, no copies)."""
        fields = {key: rollout[key] for key in self.fields}
        obs = dict(rollout[OBS].items())
        pointers = tuple(t.data_ptr() for t in [*fields.values(), *obs.values()])
        if pointers == self._bound:
            return
        self._bound, self._graphs = pointers, {}
        self._num_envs.fill_(rollout.batch_size[0])
        self._horizon.fill_(num_steps(rollout))
        self._sources = {key: _flat(value) for key, value in fields.items()}
        self._obs = {key: _flat(value) for key, value in obs.items()}

    def step(self, indices: torch.Tensor) -> None:
        """One minibatch step (replayed from a CUDA graph where captured)."""
        if not self.graphs_wanted:
            self._step(indices)
            return
        size = indices.numel()
        if size not in self._graphs:
            self._graphs[size] = self._capture(indices)
        graph, static = self._graphs[size]
        static.copy_(indices)
        graph.replay()

    def _step(self, indices: torch.Tensor) -> None:
        if self.one_function:
            with torch.no_grad():  # `torch.func.grad` differentiates all the same
                self._one(indices)
            return
        self.grads.zero()
        loss, stats = self._forward(indices)
        loss.backward()
        self._update(loss, stats)

    def _one_eager(self, indices: torch.Tensor) -> None:
        """The whole step as one function (what `self._one` compiles)."""
        grads, (loss, stats) = torch.func.grad_and_value(self._loss_of, has_aux=True)(
            tuple(self.adam.params), indices
        )
        self._apply(loss, stats, torch.cat([grad.reshape(-1) for grad in grads]))

    def _loss_of(
        self, params: tuple[torch.Tensor, ...], indices: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss (differentiated) and its statistics (auxiliary) at `params`."""
        values = dict(zip(self._names, params, strict=True))
        return torch.func.functional_call(self._holder, values, (indices,))

    def _forward_eager(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        num_envs, horizon = self._num_envs, self._horizon
        # Transition (env i, step t) lives at row t * N + i of the time-major storage.
        rows = (indices % horizon) * num_envs + indices // horizon
        take = {key: src.index_select(0, rows) for key, src in self._sources.items()}
        obs = {key: src.index_select(0, rows) for key, src in self._obs.items()}
        advantage = take[ADVANTAGE]
        if self.normalize_advantage and advantage.shape[0] >= 2:
            take[ADVANTAGE] = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        return self.loss_terms(obs, *(take[key] for key in self.fields))

    def _update_eager(self, loss: torch.Tensor, stats: torch.Tensor) -> None:
        self._apply(loss, stats, self.grads.buffer)

    @torch.no_grad()
    def _apply(self, loss: torch.Tensor, stats: torch.Tensor, grad: torch.Tensor) -> None:
        """Clip the flat gradient `grad` (in place) and step Adam with it, where the step
        is still active and finite; count its statistics; drop the flag on a stop."""
        norm = torch.linalg.vector_norm(grad)
        finite = torch.isfinite(loss) & torch.isfinite(norm)
        applied = self.active & finite
        if self.max_grad_norm is not None:
            grad.mul_(torch.clamp(self.max_grad_norm / (norm + 1e-6), max=1.0))
        self.adam.apply(grad, applied)
        # The first failing step is counted, so its NaN shows in the update's statistics.
        self.sums.add_(torch.where(self.active, stats, torch.zeros_like(stats)))
        self.count.add_(self.active.to(self.count.dtype))
        keep = applied
        if self.target_kl is not None:
            keep = keep & ~(stats[self.kl_index] > 1.5 * self.target_kl)
        self.active.copy_(keep)

    def _state_tensors(self) -> list[torch.Tensor]:
        return [
            *self.adam.params, *self.adam.state_tensors(), self.sums, self.count, self.active,
        ]  # fmt: skip

    def _capture(self, indices: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Compile and warm up on a side stream (as CUDA graphs require), capture, then
        restore what the warm-up steps changed, so the first replay is the first step."""
        saved = [t.detach().clone() for t in self._state_tensors()]
        static = indices.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self._step(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step(static)
        with torch.no_grad():
            for tensor, value in zip(self._state_tensors(), saved, strict=True):
                tensor.copy_(value)
        return graph, static


class _LossModule(torch.nn.Module):
    """The policy as a submodule of the step's loss, so that `torch.func.functional_call`
    can hand the loss the parameters it differentiates (the loss reads the policy)."""

    def __init__(self, module: torch.nn.Module, loss: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.module, self.loss = module, loss

    def forward(self, indices: torch.Tensor) -> Any:
        return self.loss(indices)


def _flat(value: torch.Tensor) -> torch.Tensor:
    """A rollout field of batch [N, T + 1] (time-major storage) as [(T + 1) * N, ...]: a
    view, so the steps read what the collector and the advantages wrote."""
    time_major = value.transpose(0, 1)
    if not time_major.is_contiguous():
        raise ValueError(
            "the whole-step path reads rollouts allocated by rlcore.rollout.make_rollout "
            f"(time-major storage); got a field of strides {tuple(value.stride())}"
        )
    return time_major.view(-1, *value.shape[2:])
