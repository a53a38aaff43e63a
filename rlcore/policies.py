"""Actor-critic and actor-only MLP policies with Gaussian or Categorical action heads.

The collector only ever calls `act` / `act_deterministic` under `torch.inference_mode()`;
the algorithms call `evaluate`. Distributions are written out by hand (no
`torch.distributions` objects) because object construction and argument validation cost
more than the maths at the batch sizes used here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import gymnasium.spaces as spaces
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlcore.config import PolicyConfig
from rlcore.errors import ConfigError

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
# What each activation module's forward calls (with its default arguments).
_ACTIVATION_FUNCTIONS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.ELU: F.elu}
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ActOutput(NamedTuple):
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor | None


class EvalOutput(NamedTuple):
    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor | None


class RunningNorm(nn.Module):
    """Running mean/variance observation normaliser; its statistics are saved as buffers."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge a batch of observations."""
        batch = batch.reshape(-1, batch.shape[-1]).double()
        self.merge(batch.shape[0], batch.mean(0), batch.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, n: float, b_mean: torch.Tensor, b_var: torch.Tensor) -> None:
        """Merge the count, mean and biased variance of a batch (Chan et al. parallel
        variance); data-parallel ranks merge the moments of all ranks' batches."""
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * (n / total)
        self.var.copy_(
            (self.var * self.count + b_var * n + delta**2 * self.count * n / total) / total
        )
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scale = (self.var + self.eps).rsqrt().float()
        return ((obs - self.mean.float()) * scale).clamp_(-self.clip, self.clip)


class MLP(nn.Sequential):
    """Linear layers and activations whose forward calls their functions directly.

    A module call costs microseconds of Python (hooks, dispatch) whatever the layer's size,
    and an actor-critic forward makes a dozen: on Gymnasium CartPole's 64x64 networks,
    collecting took 0.94x the time without them (`benchmarks/versus_revision.py`). The
    layers, parameters and state-dict keys are an `nn.Sequential`'s, and the functions
    applied are the ones its modules' forwards call, so the numbers are the same to the bit.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            if type(layer) is nn.Linear:
                x = F.linear(x, layer.weight, layer.bias)
            else:
                function = _ACTIVATION_FUNCTIONS.get(type(layer))
                x = function(x) if function is not None else layer(x)
        return x


def _mlp(in_dim: int, out_dim: int, cfg: PolicyConfig, out_gain: float) -> MLP:
    layers: list[nn.Module] = []
    for size in cfg.hidden_sizes:
        linear = nn.Linear(in_dim, size)
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[cfg.activation]()]
        in_dim = size
    head = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    return MLP(*layers, head)


class Actor(nn.Module):
    """Actor-only policy (critic-free algorithms such as GRPO)."""

    has_critic = False

    def __init__(self, obs_dim: int, action_space: spaces.Space, cfg: PolicyConfig) -> None:
        super().__init__()
        if isinstance(action_space, spaces.Discrete):
            self.discrete, self.action_dim, out_dim = True, 1, int(action_space.n)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.discrete, self.action_dim = False, int(action_space.shape[0])
            out_dim = self.action_dim
            self.log_std = nn.Parameter(torch.full((out_dim,), cfg.init_log_std))
        else:
            raise ValueError(f"unsupported action space {action_space}: need Discrete or 1-D Box")
        self.obs_dim = obs_dim
        self.obs_norm = RunningNorm(obs_dim) if cfg.normalize_obs else None
        self.actor = _mlp(obs_dim, out_dim, cfg, out_gain=0.01)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return obs if self.obs_norm is None else self.obs_norm(obs)

    def _networks(self) -> list[nn.Sequential]:
        return [self.actor]

    def activation_bytes_per_sample(self) -> int:
        """Estimated bytes one sample's forward + backward keeps alive during an update.

        Per network: every layer's output and its activation output, saved for backward;
        plus the normalised observation and its gradient. Against PPO updates measured on
        CPU (64x64 actor and critic: ~1.6 kB per sample; estimate 2.1 kB) it errs on the
        large side, which is the safe side for sizing micro-batches.
        """
        floats = 2 * self.obs_dim
        for net in self._networks():
            floats += 2 * sum(m.out_features for m in net if isinstance(m, nn.Linear))
        return 4 * floats

    def _sample(
        self, out: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            # Gumbel-max sampling: argmax(logits + Gumbel noise) ~ Categorical(logits).
            log_probs = out.log_softmax(-1)
            u = torch.rand(out.shape, generator=generator, device=out.device)
            action = (log_probs - (-u.clamp_min_(1e-20).log_()).log_()).argmax(-1)
            return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        noise = torch.randn(out.shape, generator=generator, device=out.device)
        action = torch.addcmul(out, noise, self.log_std.exp())
        log_prob = (-0.5 * noise.square() - self.log_std - _HALF_LOG_2PI).sum(-1)
        return action, log_prob

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> ActOutput:
        """Sample actions for a batch of observations (collection; call without grad).

        Shape:
            obs: [B, obs_dim]; action: [B] int64 or [B, action_dim]; log_prob, value: [B]
        """
        action, log_prob = self._sample(self.actor(self.normalize(obs)), generator)
        return ActOutput(action, log_prob, None)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Return the mode of the action distribution (evaluation, video)."""
        out = self.actor(self.normalize(obs))
        return out.argmax(-1) if self.discrete else out

    def _log_prob_entropy(
        self, out: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            log_probs = out.log_softmax(-1)
            log_prob = log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            return log_prob, -(log_probs.exp() * log_probs).sum(-1)
        z = (action - out) * (-self.log_std).exp()
        log_prob = (-0.5 * z.square() - self.log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + self.log_std).sum().expand(out.shape[0])
        return log_prob, entropy

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> EvalOutput:
        """Log-probability and entropy of given actions, with gradients (the update)."""
        log_prob, entropy = self._log_prob_entropy(self.actor(self.normalize(obs)), action)
        return EvalOutput(log_prob, entropy, None)


class ActorCritic(Actor):
    """Separate actor and critic MLPs over a shared observation normaliser (PPO)."""

    has_critic = True

    def __init__(self, obs_dim: int, action_space: spaces.Space, cfg: PolicyConfig) -> None:
        super().__init__(obs_dim, action_space, cfg)
        self.critic = _mlp(obs_dim, 1, cfg, out_gain=1.0)

    def _networks(self) -> list[nn.Sequential]:
        return [self.actor, self.critic]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values. Shape: obs [B, obs_dim] -> [B]."""
        return self.critic(self.normalize(obs)).squeeze(-1)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> ActOutput:
        x = self.normalize(obs)
        action, log_prob = self._sample(self.actor(x), generator)
        return ActOutput(action, log_prob, self.critic(x).squeeze(-1))

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> EvalOutput:
        x = self.normalize(obs)
        log_prob, entropy = self._log_prob_entropy(self.actor(x), action)
        return EvalOutput(log_prob, entropy, self.critic(x).squeeze(-1))


def make_policy(
    obs_dim: int, action_space: spaces.Space, cfg: PolicyConfig, with_critic: bool
) -> Actor:
    """Build an actor-critic (algorithms with a value function) or an actor-only policy."""
    return (ActorCritic if with_critic else Actor)(obs_dim, action_space, cfg)


# The builtin algorithms' policy factories (`AlgorithmSpec.policy`): evaluation and videos
# build the trained policy from these without importing the training code (tensordict and,
# through it, torch._dynamo: ~1.5 s of every evaluate and video process).
def actor_critic_policy(
    obs_dim: int, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> ActorCritic:
    """PPO's: an actor-critic, since PPO learns a value function for its advantages."""
    return ActorCritic(obs_dim, action_space, policy)


def actor_policy(
    obs_dim: int, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> Actor:
    """GRPO's: an actor alone, GRPO being critic-free."""
    return Actor(obs_dim, action_space, policy)


def squashed_gaussian_policy(
    obs_dim: int, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> SquashedGaussianActor:
    """SAC's squashed Gaussian actor; it needs a bounded 1-D Box action space."""
    if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
        raise ConfigError(
            f"algorithm.name 'sac' needs a continuous (1-D Box) action space; this env's "
            f"is {action_space}: use ppo or grpo for it"
        )
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ConfigError(
            f"algorithm.name 'sac' squashes actions into the Box's bounds, and this env's "
            f"are not finite ({action_space})"
        )
    return SquashedGaussianActor(obs_dim, action_space, policy)


def _log_squash_jacobian(pre_tanh: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2), summed over action dims, in the overflow-free form
    2 (log 2 - u - softplus(-2u))."""
    return (2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))).sum(-1)


class SquashedGaussianActor(nn.Module):
    """A tanh-squashed Gaussian policy over a bounded Box (SAC; Haarnoja et al., 2018).

    The network outputs a mean and a state-dependent log-std; actions are
    `tanh(u) * scale + bias` for `u ~ N(mean, std)`, so they always lie in the Box, and the
    log-probability carries the change-of-variables correction of the squashing. The
    normaliser (`normalize_obs`) is shared with the critics, which read `normalize`.
    """

    has_critic = False
    discrete = False
    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, obs_dim: int, action_space: spaces.Box, cfg: PolicyConfig) -> None:
        super().__init__()
        self.obs_dim, self.action_dim = obs_dim, int(action_space.shape[0])
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)
        self.obs_norm = RunningNorm(obs_dim) if cfg.normalize_obs else None
        layers: list[nn.Module] = []
        in_dim = obs_dim
        for size in cfg.hidden_sizes:
            layers += [nn.Linear(in_dim, size), ACTIVATIONS[cfg.activation]()]
            in_dim = size
        self.actor = nn.Sequential(*layers, nn.Linear(in_dim, 2 * self.action_dim))

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return obs if self.obs_norm is None else self.obs_norm(obs)

    def _mean_log_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Under bf16 autocast (SAC's `precision`) the sampling math stays in x's dtype.
        mean, log_std = self.actor(x).to(x.dtype).chunk(2, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def sample_normalized(
        self, x: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised squashed actions in [-1, 1] and their log-probabilities, with
        gradients, from already normalised observations (the SAC losses).

        Shape:
            x: [B, obs_dim]; returns [B, action_dim] and [B]
        """
        mean, log_std = self._mean_log_std(x)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        pre_tanh = mean + noise * log_std.exp()
        gaussian = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
        return pre_tanh.tanh(), gaussian - _log_squash_jacobian(pre_tanh)

    def to_env(self, squashed: torch.Tensor) -> torch.Tensor:
        """Map actions in [-1, 1] onto the Box."""
        return torch.addcmul(self.action_bias, squashed, self.action_scale)

    def from_env(self, action: torch.Tensor) -> torch.Tensor:
        """Map Box actions back onto [-1, 1] (what the critics read)."""
        return (action - self.action_bias) / self.action_scale

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> ActOutput:
        """Sample Box actions (collection; call without grad). Shape: obs [B, obs_dim]."""
        squashed, log_prob = self.sample_normalized(self.normalize(obs), generator)
        return ActOutput(self.to_env(squashed), log_prob, None)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean action (evaluation, video)."""
        mean, _ = self._mean_log_std(self.normalize(obs))
        return self.to_env(mean.tanh())


class UniformRandomPolicy(nn.Module):
    """Uniform actions over a bounded Box: the off-policy warm-up's behaviour policy."""

    has_critic = False

    def __init__(self, obs_dim: int, action_space: spaces.Box) -> None:
        super().__init__()
        self.obs_dim, self.action_dim = obs_dim, int(action_space.shape[0])
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("low", low)
        self.register_buffer("width", high - low)

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> ActOutput:
        u = torch.rand(
            (obs.shape[0], self.low.shape[0]), generator=generator, device=self.low.device
        )
        action = torch.addcmul(self.low, u, self.width)
        return ActOutput(action, torch.zeros(obs.shape[0], device=obs.device), None)
