"""Soft Actor-Critic (Haarnoja et al., 2018a; automatic temperature, 2018b).

Off-policy: the trainer's off-policy loop (`rlcore.off_policy`) fills a replay buffer and
calls `update` once per gradient step with a sampled batch. Reads from the batch: `obs`,
`action` (in the env's Box), `reward`, `next_obs` (the true final observation of a
time-limit end), `terminated`. A terminated transition never bootstraps; a truncated one
always does (its `terminated` is false), so time limits leave the targets unbiased.
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torch import nn

from rlcore.algos.base import AlgorithmContext
from rlcore.algos.compile import compiled
from rlcore.algos.sac_config import SACConfig
from rlcore.encoders import random_shift
from rlcore.policies import (
    SquashedGaussianActor,
    activation_function,
    squashed_gaussian_policy,
)
from rlcore.precision import trains_bf16, update_autocast
from rlcore.replay import NEXT_OBS
from rlcore.rollout import ACTION, OBS, REWARD, TERMINATED


class TwinQ(nn.Module):
    """Two Q networks evaluated as one batched MLP (one `baddbmm` per layer for both).

    Initialised like `nn.Linear` (uniform in ±1/sqrt(fan_in)), independently per network.
    Under bf16 autocast the hidden layers multiply in bf16 and the output layer in float32:
    Q values of hundreds would lose the reward's scale to bf16's 8-bit mantissa.

    Shape:
        obs: [B, obs_dim], action: [B, action_dim] -> [2, B]
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_sizes: tuple[int, ...], activation: str
    ) -> None:
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden_sizes, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            weight = torch.empty(2, fan_in, fan_out).uniform_(-bound, bound)
            self.weights.append(nn.Parameter(weight))
            bias = torch.empty(2, 1, fan_out).uniform_(-bound, bound)
            self.biases.append(nn.Parameter(bias))
        self.activation = activation_function(activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Both networks' Q values of (`obs`, `action`), stacked on a leading axis of 2."""
        x = torch.cat([obs, action], dim=-1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if i < last:
                x = self.activation(torch.baddbmm(bias, x, weight))
            else:
                with torch.autocast(x.device.type, enabled=False):
                    x = torch.baddbmm(bias, x.to(weight.dtype), weight)
        return x.squeeze(-1)


class SAC:
    """Twin-critic SAC with Polyak-averaged targets and a learned temperature."""

    off_policy: ClassVar[bool] = True
    same_step_reset: ClassVar[bool] = True  # every env step is a stored transition
    groups = None
    metric_names = (
        "loss/critic",
        "loss/actor",
        "loss/alpha",
        "stats/alpha",
        "stats/q_mean",
        "stats/entropy",
    )

    make_policy = staticmethod(squashed_gaussian_policy)

    @classmethod
    def build(cls, ctx: AlgorithmContext) -> SAC:
        """SAC for one run, its critics initialised from the run's seed."""
        assert isinstance(ctx.policy, SquashedGaussianActor)
        hidden = ctx.cfg.critic_hidden_sizes or ctx.experiment.policy.hidden_sizes
        # The critics' initial weights come from the run's seed, as the policy's do.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.experiment.trainer.seed + 1)
            return cls(
                ctx.policy, ctx.cfg, hidden, ctx.experiment.policy.activation, ctx.generator,
                compile_update=ctx.compile_loss,
            )  # fmt: skip

    def __init__(
        self,
        actor: SquashedGaussianActor,
        cfg: SACConfig,
        critic_hidden_sizes: tuple[int, ...],
        activation: str,
        generator: torch.Generator,
        compile_update: bool = False,
    ) -> None:
        self.actor, self.cfg, self.generator = actor, cfg, generator
        device = actor.action_scale.device
        critic_input = actor.critic_reader.out_dim
        self.critic = TwinQ(critic_input, actor.action_dim, critic_hidden_sizes, activation)
        self.critic.to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_alpha), device=device, requires_grad=cfg.autotune_alpha
        )
        self.target_entropy = (
            -float(actor.action_dim) if cfg.target_entropy is None else cfg.target_entropy
        )
        # Fused Adam: one kernel per step instead of a loop of small ops over the tensors,
        # several times faster on CPU.
        adam = lambda params, lr: torch.optim.Adam(  # noqa: E731
            params, lr=lr, eps=cfg.adam_eps, fused=True
        )
        self.actor_optimizer = adam(actor.actor.parameters(), cfg.lr)
        # Image encoders (pixels) learn from the critics' loss alone (DrQ-v2).
        encoders = [p for e in actor.image_encoders() for p in e.parameters()]
        self.critic_optimizer = adam(
            [*self.critic.parameters(), *encoders], cfg.critic_lr or cfg.lr
        )
        self._images = [key for key, entry in actor.obs_spec.items() if entry.is_image]
        self.alpha_optimizer = adam([self.log_alpha], cfg.alpha_lr or cfg.lr)
        self._params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self._mixed_precision = trains_bf16(cfg.precision, device)
        self._device_type = device.type
        # Compiled: the critics' and the actor's losses (forward, and backward through
        # AOTAutograd); the optimizer steps stay eager (fused Adam). The random draws stay
        # out of the compiled code (a generator cannot enter it) and come first, in the
        # eager update's order. Image observations' random shifts draw inside the losses:
        # those run eager.
        self._compiled = compile_update and not (self._images and cfg.random_shift)
        # On CPU, for flat observations (float32 or bf16 products), the whole update is one
        # compiled function instead (`_one_eager`): gradients by `torch.func`, forward and
        # backward in one graph, then Adam (`DeviceAdam`, whose state converts to and from
        # the optimizers' for checkpoints) and the target update. Between the two losses'
        # functions, the autograd engine and the three optimizers' steps were a fifth of
        # the float32 update and a third of the bf16 one (benchmarks/README.md,
        # *sac_update*).
        self._one_function = self._compiled and device.type == "cpu" and not self._images
        if self._one_function:
            from rlcore.algos.whole_step import DeviceAdam

            self._adams = [
                DeviceAdam(list(opt.param_groups[0]["params"]), opt.defaults["lr"], cfg.adam_eps)
                for opt in self._optimizers()
            ]
            self._enabled = torch.ones((), dtype=torch.bool, device=device)
            self._holder = _Holder(self)
            self._critic_names = [f"critic.{n}" for n, _ in self.critic.named_parameters()]
            self._actor_names = [f"actor.actor.{n}" for n, _ in actor.actor.named_parameters()]
            self._one = compiled(self._one_eager)
        elif self._compiled:  # sizes turn dynamic at a second size (as `WholeStep`'s do)
            self._critic_terms = compiled(self._critic_terms)
            self._actor_terms = compiled(self._actor_terms)

    def _optimizers(self) -> list[torch.optim.Adam]:
        """The critics', the actor's and the temperature's optimizers, in step order."""
        return [self.critic_optimizer, self.actor_optimizer, self.alpha_optimizer]

    def _autocast(self) -> torch.autocast:
        """bf16 matrix products inside the losses when `precision: bfloat16`, else a no-op."""
        return update_autocast(self._mixed_precision, torch.device(self._device_type))

    def critic_target_value(
        self, batch: TensorDict | dict, alpha: torch.Tensor, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')
        (`noise`: its standard normal draws, else drawn from the generator).

        Shape: returns [B]
        """
        cfg, actor = self.cfg, self.actor
        with torch.no_grad():
            next_x, next_critic_x = actor.features(self._augmented(batch[NEXT_OBS]))
            next_action, next_log_prob = actor.sample_normalized(next_x, self.generator, noise)
            next_q = self.critic_target(next_critic_x, next_action).amin(0)
            soft_value = next_q - alpha * next_log_prob
            keep = (~batch[TERMINATED]).float()
            return batch[REWARD] * cfg.reward_scale + cfg.gamma * keep * soft_value

    def _augmented(self, obs: TensorDict) -> TensorDict | dict[str, torch.Tensor]:
        """`obs` with its images randomly shifted (`random_shift`), else `obs` itself."""
        pad = self.cfg.random_shift
        if not pad or not self._images:
            return obs
        shifted = dict(obs.items())
        for key in self._images:
            shifted[key] = random_shift(shifted[key], pad, self.generator)
        return shifted

    def update(self, batch: TensorDict) -> torch.Tensor:
        """One gradient step of critics, actor and temperature, then the target update.

        Returns the detached stats in `metric_names` order (no host sync).
        """
        noise: list[torch.Tensor | None] = [None, None]
        data: TensorDict | dict = batch
        if self._compiled:
            # The draws the eager update makes, in its order: a' ~ pi(s'), then a ~ pi(s).
            shape, device = (batch.batch_size[0], self.actor.action_dim), self.log_alpha.device
            noise = [torch.randn(shape, generator=self.generator, device=device) for _ in noise]
            data = {key: _plain(batch[key]) for key in (OBS, NEXT_OBS, ACTION, REWARD, TERMINATED)}
            if self._one_function:
                with torch.no_grad():  # `torch.func.grad` differentiates all the same
                    return self._one(data, noise[0], noise[1])
        alpha = self.log_alpha.detach().exp()
        critic_loss, q, x, critic_x = self._critic_terms(data, alpha, noise[0])
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        self.critic.requires_grad_(False)  # the actor's loss moves the actor alone
        # ... and not the image encoders
        actor_loss, log_prob = self._actor_terms(x.detach(), critic_x.detach(), alpha, noise[1])
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.critic.requires_grad_(True)

        log_prob = log_prob.detach()
        alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
        if self.cfg.autotune_alpha:
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
        self.update_targets()
        return torch.stack(
            [
                critic_loss.detach(),
                actor_loss.detach(),
                alpha_loss.detach(),
                alpha,
                q[0].detach().mean(),
                -log_prob.mean(),
            ]
        )

    def _one_eager(
        self, data: dict, critic_noise: torch.Tensor, actor_noise: torch.Tensor
    ) -> torch.Tensor:
        """The update (`update`'s steps, in its order) as one function: what `self._one`
        compiles. Returns the stats in `metric_names` order."""
        critic_adam, actor_adam, alpha_adam = self._adams
        alpha = self.log_alpha.detach().exp()

        def critic_loss(params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple]:
            values = dict(zip(self._critic_names, params, strict=True))
            loss, q, x, critic_x = torch.func.functional_call(
                self._holder, values, ("critic", data, alpha, critic_noise)
            )
            return loss, (q, x, critic_x)

        grads, (critic_loss_value, (q, x, critic_x)) = torch.func.grad_and_value(
            critic_loss, has_aux=True
        )(tuple(critic_adam.params))
        critic_adam.apply(grads, self._enabled)

        def actor_loss(params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
            values = dict(zip(self._actor_names, params, strict=True))
            return torch.func.functional_call(
                self._holder, values, ("actor", x, critic_x, alpha, actor_noise)
            )

        grads, (actor_loss_value, log_prob) = torch.func.grad_and_value(actor_loss, has_aux=True)(
            tuple(actor_adam.params)
        )
        actor_adam.apply(grads, self._enabled)

        # d/d(log alpha) of -(log_alpha (log_prob + target_entropy)).mean()
        alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
        if self.cfg.autotune_alpha:
            alpha_grad = -(log_prob + self.target_entropy).mean().reshape(1)
            alpha_adam.apply(alpha_grad, self._enabled)
        self.update_targets()
        return torch.stack(
            [critic_loss_value, actor_loss_value, alpha_loss, alpha, q[0].mean(), -log_prob.mean()]
        )

    def _critic_terms(
        self, batch: TensorDict | dict, alpha: torch.Tensor, noise: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The critics' loss, their Q values and the actor's and critics' inputs of `obs`."""
        with self._autocast():
            target = self.critic_target_value(batch, alpha, noise)
            x, critic_x = self.actor.features(self._augmented(batch[OBS]))
            q = self.critic(critic_x, self.actor.from_env(batch[ACTION]))
        return 0.5 * (q - target).square().mean(1).sum(), q, x, critic_x

    def _actor_terms(
        self,
        x: torch.Tensor,
        critic_x: torch.Tensor,
        alpha: torch.Tensor,
        noise: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's loss and the log-probabilities of its sampled actions."""
        with self._autocast():
            action, log_prob = self.actor.sample_normalized(x, self.generator, noise)
            q_pi = self.critic(critic_x, action).amin(0)
        return (alpha * log_prob - q_pi).mean(), log_prob

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak: target <- target + tau (online - target)."""
        torch._foreach_lerp_(self._target_params, self._params, self.cfg.tau)

    def state_dict(self) -> dict[str, Any]:
        """Critics, target critics, temperature and the three optimizers' states."""
        if self._one_function:  # their state, in torch Adam's format (a host read)
            for device_adam, adam in zip(self._adams, self._optimizers(), strict=True):
                device_adam.write_into(adam)
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore critics, targets, temperature and optimizers from `state_dict`."""
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        if self._one_function:
            for device_adam, adam in zip(self._adams, self._optimizers(), strict=True):
                device_adam.read_from(adam)

    def rank_state_dict(self) -> dict[str, Any]:
        """Nothing differs between ranks but what the trainer saves itself (the buffer)."""
        return {}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: `rank_state_dict` is empty."""


def _plain(value: torch.Tensor | TensorDict) -> torch.Tensor | dict[str, torch.Tensor]:
    """A batch field as a tensor or a dict of tensors (what a compiled function reads)."""
    return dict(value.items()) if isinstance(value, TensorDict) else value


class _Holder(nn.Module):
    """SAC's networks as submodules of one module, so `torch.func.functional_call` can hand
    either loss the parameters it differentiates (critic.*, actor.actor.*)."""

    def __init__(self, sac: SAC) -> None:
        super().__init__()
        self.critic, self.actor = sac.critic, sac.actor
        self._terms = {"critic": sac._critic_terms, "actor": sac._actor_terms}

    def forward(self, which: str, *args: Any) -> Any:
        return self._terms[which](*args)
