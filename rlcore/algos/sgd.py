"""The optimisation step shared by the on-policy algorithms: micro-batched gradient steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from tensordict import TensorDict

from rlcore.algos.config import MIN_AUTO_MICROBATCH
from rlcore.distributed import Distributed
from rlcore.policies import Actor
from rlcore.rollout import nominal_bytes

if TYPE_CHECKING:
    from rlcore.algos.whole_step import DeviceAdam

LossFn = Callable[[slice], tuple[torch.Tensor, torch.Tensor]]
"""Loss and detached stats vector of the minibatch rows in a slice (a mean over them)."""


def resolve_microbatch_size(
    setting: int | Literal["auto"] | None, rollout: TensorDict, policy: Actor
) -> int | None:
    """Samples per forward/backward chunk of a minibatch (None: the whole minibatch).

    "auto" on CPU: as many samples as have activations (as estimated by the policy)
    fitting in half the rollout's nominal bytes, at least `MIN_AUTO_MICROBATCH`.
    That keeps the update's extra memory under the rollout's own size (for rollouts of
    a few MB and up) at about the update time of whole minibatches on CPU, where a chunk
    adds little but its own overhead (`benchmarks.update_memory` times both). "auto" on
    accelerators: whole minibatches, since there every chunk costs kernel launches and
    activation memory is rarely the limit.
    """
    if setting != "auto":
        return setting
    if rollout.device is not None and rollout.device.type != "cpu":
        return None
    budget = nominal_bytes(rollout) // 2
    return max(budget // policy.activation_bytes_per_sample(), MIN_AUTO_MICROBATCH)


class PolicyOptimizer:
    """Adam over a policy's parameters, its learning-rate schedule and update count.

    `schedule` "linear" anneals from `lr` to 0 over `total_updates`; anything else keeps the
    current rate, which an algorithm may also adapt itself (`set_lr`). The state dict holds
    all of it, so a resumed run steps with the same rates.

    With several ranks (`dist`), every step averages the gradients and loss statistics over
    the ranks before clipping and Adam, so all ranks take the same step; this is the one
    place where parameters change, so no algorithm can step around the averaging.
    """

    def __init__(
        self,
        policy: Actor,
        lr: float,
        adam_eps: float,
        schedule: str,
        total_updates: int,
        dist: Distributed | None = None,
    ) -> None:
        self.policy, self.base_lr, self.schedule = policy, lr, schedule
        self.dist = dist or Distributed()
        self.parameters = list(policy.parameters())
        self.total_updates = max(total_updates, 1)
        self.num_updates = 0
        self.lr = lr
        # Fused Adam: one kernel per step instead of several per parameter tensor.
        self.adam = torch.optim.Adam(policy.parameters(), lr=lr, eps=adam_eps, fused=True)
        self.grads: Gradients = (
            FlatGradients(self.parameters)
            if FlatGradients.fits(self.parameters)
            else TensorGradients(self.parameters)
        )
        # The whole-step path's Adam (`use_device_adam`): the state lives there instead.
        self.device_adam: DeviceAdam | None = None

    def use_device_adam(self) -> DeviceAdam:
        """Step with a `DeviceAdam` from now on (the whole-step path of `runtime.compile`),
        taking over this optimizer's state; checkpoints keep torch Adam's format."""
        from rlcore.algos.whole_step import DeviceAdam

        if not isinstance(self.grads, FlatGradients):
            raise ValueError("the whole-step path needs parameters of one dtype and device")
        self.device_adam = DeviceAdam(self.parameters, self.lr, self.adam.defaults["eps"])
        self.device_adam.read_from(self.adam)
        return self.device_adam

    def begin_update(self) -> None:
        """Apply the schedule's rate for the update about to run."""
        if self.schedule == "linear":
            self.set_lr(self.base_lr * max(1.0 - self.num_updates / self.total_updates, 0.0))

    def end_update(self) -> None:
        """Count the update just run (the linear schedule's clock)."""
        self.num_updates += 1

    def set_lr(self, lr: float) -> None:
        """Set the rate every later Adam step uses (the schedule's, or an algorithm's own)."""
        self.lr = lr
        for group in self.adam.param_groups:
            group["lr"] = lr
        if self.device_adam is not None:
            self.device_adam.lr.fill_(lr)

    def step(
        self, size: int, chunk: int | None, loss_fn: LossFn, max_grad_norm: float | None
    ) -> torch.Tensor:
        """One Adam step on a minibatch of `size` rows; returns the minibatch's mean stats
        (over all ranks' minibatches).

        The loss is a mean over the minibatch, so summing `loss_chunk * len_chunk / size`
        over chunks of `chunk` rows gives the same gradient while only one chunk's
        activations are alive (`chunk` None: the whole minibatch at once).
        """
        self.grads.zero()
        if chunk is None or chunk >= size:
            loss, stats = loss_fn(slice(0, size))
            loss.backward()
        else:
            stats = None
            for start in range(0, size, chunk):
                weight = (min(start + chunk, size) - start) / size
                loss, part_stats = loss_fn(slice(start, start + chunk))
                (loss * weight).backward()
                stats = part_stats * weight if stats is None else stats + part_stats * weight
            assert stats is not None
        self.grads.reattach()
        stats = self.dist.average_gradients(self.parameters, size, stats)
        if max_grad_norm is not None:
            self.grads.clip_norm(max_grad_norm)
        fused_adam_step(self.adam)
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Adam's state in torch's format, the update count and the current rate."""
        if self.device_adam is not None:  # its state, in torch Adam's format (a host read)
            self.device_adam.write_into(self.adam)
            self.set_lr(float(self.device_adam.lr))
        return {"optimizer": self.adam.state_dict(), "num_updates": self.num_updates, "lr": self.lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore Adam, the update count and the rate (into `DeviceAdam` too, if in use)."""
        self.adam.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])
        self.set_lr(float(state["lr"]))
        if self.device_adam is not None:
            self.device_adam.read_from(self.adam)


def fused_adam_step(adam: torch.optim.Adam) -> None:
    """`adam.step()` for a fused Adam of one parameter group: the same two kernels (the
    step counts, then `_fused_adam_`) on the same tensors, so the same bits, without
    `Optimizer.step`'s per-call bookkeeping (hooks, profiling, regrouping), which on a
    small network cost as much as the kernel (benchmarks/README.md, *versus_revision*).
    Anything else (the first step, which creates the state; a parameter without a
    gradient; several groups or dtypes; AMSGrad, weight decay) takes `adam.step()`."""
    group = adam.param_groups[0]
    params = group["params"]
    states = [adam.state.get(param) for param in params]
    plain = (
        len(adam.param_groups) == 1
        and group["fused"]
        and not (group["amsgrad"] or group["weight_decay"] or group["maximize"])
        and not (group["capturable"] or group["differentiable"] or group["decoupled_weight_decay"])
        and all(isinstance(beta, float) for beta in group["betas"])
        and all(states)
        and all(param.grad is not None for param in params)
        and len({(param.device, param.dtype) for param in params}) == 1
    )
    if not plain:
        adam.step()
        return
    steps = [state["step"] for state in states]  # type: ignore[index]
    torch._foreach_add_(steps, 1)
    beta1, beta2 = group["betas"]
    torch._fused_adam_(
        params,
        [param.grad for param in params],
        [state["exp_avg"] for state in states],  # type: ignore[index]
        [state["exp_avg_sq"] for state in states],  # type: ignore[index]
        [],
        steps,
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=0.0,
        eps=group["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


class TensorGradients:
    """Gradients as autograd leaves them, one tensor per parameter: the general case."""

    def __init__(self, parameters: list[torch.nn.Parameter]) -> None:
        self.parameters = parameters

    def zero(self) -> None:
        """Drop every gradient, so that backward allocates fresh ones."""
        for param in self.parameters:
            param.grad = None

    def reattach(self) -> None:
        """Nothing to repair: these gradients are not views of a shared buffer."""

    def clip_norm(self, max_norm: float) -> torch.Tensor:
        """Clip with `torch.nn.utils.clip_grad_norm_`; return the total norm before it."""
        return torch.nn.utils.clip_grad_norm_(self.parameters, max_norm)


class FlatGradients:
    """The parameters' gradients as views of one buffer: zeroing them is one fill, and norm
    clipping one multiply without `clip_grad_norm_`'s per-call sorting of tensors by device
    and dtype.

    On the small networks of control tasks an optimizer step is a few hundred tiny tensor
    ops, each costing more in dispatch than in arithmetic (see the guide, *Faster
    updates*). Backward adds into a `.grad` that exists in place, so the views stay
    attached; `reattach` repairs any that code outside replaced (a
    `zero_grad(set_to_none=True)`, say). The results are bit-identical to per-tensor
    gradients: the same norms of the same values, the same products
    (`benchmarks/versus_revision.py` checks it, and measures the time).
    """

    def __init__(self, parameters: list[torch.nn.Parameter]) -> None:
        self.parameters = parameters
        first = parameters[0]
        self.buffer = torch.zeros(
            sum(p.numel() for p in parameters), dtype=first.dtype, device=first.device
        )
        self.views = [
            part.view_as(p)
            for part, p in zip(
                self.buffer.split([p.numel() for p in parameters]), parameters, strict=True
            )
        ]
        for param, view in zip(parameters, self.views, strict=True):
            param.grad = view

    @staticmethod
    def fits(parameters: list[torch.nn.Parameter]) -> bool:
        """One buffer can hold them all: one dtype and device (true of every rlcore policy)."""
        return bool(parameters) and len({(p.dtype, p.device) for p in parameters}) == 1

    def zero(self) -> None:
        """Zero every gradient, attaching any view that was replaced."""
        self.reattach()
        self.buffer.zero_()

    def reattach(self) -> None:
        """Make every parameter's `.grad` its view again, keeping any gradient it held."""
        for param, view in zip(self.parameters, self.views, strict=True):
            grad = param.grad
            if grad is not view:
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
                param.grad = view

    @torch.no_grad()
    def clip_norm(self, max_norm: float) -> torch.Tensor:
        """`torch.nn.utils.clip_grad_norm_` over the buffer: the same total norm (the norm
        of the per-tensor norms) and scale, one multiply."""
        # What clip_grad_norm_ computes, without its per-call grouping by device and dtype.
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self.views, 2.0)), 2.0)
        self.buffer.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total


Gradients = TensorGradients | FlatGradients
