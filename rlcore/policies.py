"""Actor-critic and actor-only MLP policies with Gaussian or Categorical action heads.

Policies read observations as named entries (`rlcore.observations`): a TensorDict or a
mapping of `[B, ...]` tensors (a plain `[B, D]` tensor stands for a flat env's one entry).
What each network reads, and how, is `rlcore.policy_inputs`.

The collector only ever calls `act` / `act_deterministic` under `torch.inference_mode()`;
the algorithms call `evaluate`. Distributions are written out by hand (no
`torch.distributions` objects) because object construction and argument validation cost
more than the maths at the batch sizes used here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import gymnasium.spaces as spaces
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlcore.config import PolicyConfig
from rlcore.errors import ConfigError
from rlcore.observations import ObsSpec
from rlcore.policy_inputs import (
    Observation,
    ObservationReader,
    ReadsObservations,
    RunningNorm,
    batch_size,
)

__all__ = ["Actor", "ActorCritic", "RunningNorm", "SquashedGaussianActor", "make_policy"]

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def relu(x: torch.Tensor) -> torch.Tensor:
    """`torch.relu`; inside `torch.compile` on CPU, written as `x * max(sign(x), 0)`.

    Compiled, ReLU's backward reads a boolean mask that the forward saves, and Inductor's
    CPU code stores boolean vectors very slowly (~20 ns an element with AVX2, torch 2.13):
    a compiled SAC update of 256x256 networks ran 1.4x slower than eager
    (benchmarks/README.md, *sac_update*). Here the saved mask is a float one (`sgn` and
    `clamp_min` are float ops that Inductor keeps float); the value is ReLU's (-0.0 where
    ReLU gives 0.0) and so is the gradient, 0 at 0 included.
    """
    if torch.compiler.is_compiling() and x.device.type == "cpu":
        return x * torch.sgn(x.detach()).clamp_min(0)
    return torch.relu(x)


# What each activation module's forward calls (with its default arguments).
_ACTIVATION_FUNCTIONS = {nn.Tanh: torch.tanh, nn.ReLU: relu, nn.ELU: F.elu}


def activation_function(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function `ACTIVATIONS[name]`'s forward computes (`relu` for "relu")."""
    return _ACTIVATION_FUNCTIONS[ACTIVATIONS[name]]


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ActOutput(NamedTuple):
    action: torch.Tensor
    log_prob: torch.Tensor
    value: torch.Tensor | None


class EvalOutput(NamedTuple):
    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor | None
    aux_loss: torch.Tensor | None = None  # `PolicyConfig.aux_obs`'s prediction loss


class MLP(nn.Sequential):
    """Linear layers and activations whose forward calls their functions directly.

    A module call costs microseconds of Python (hooks, dispatch) whatever the layer's size,
    and an actor-critic forward makes a dozen: on small networks that is a visible share of
    collection (benchmarks/README.md, *versus_revision*, "Cheaper minibatch steps"). The
    layers, parameters and state-dict keys are an `nn.Sequential`'s, and the functions
    applied are the ones its modules' forwards call, so the numbers are the same to the bit.

    Under bf16 autocast (`precision: bfloat16`) the hidden layers multiply in bf16 and the
    output layer in float32: log-probabilities and values keep float32's resolution (PPO's
    ratio of new to old probabilities is a difference of log-probabilities).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        head = len(self) - 1
        for i, layer in enumerate(self):
            if type(layer) is nn.Linear:
                if i == head and torch.is_autocast_enabled(x.device.type):
                    with torch.autocast(x.device.type, enabled=False):
                        x = F.linear(x.float(), layer.weight, layer.bias)
                else:
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


class Actor(ReadsObservations):
    """Actor-only policy (critic-free algorithms such as GRPO)."""

    has_critic = False

    def __init__(
        self, obs_spec: ObsSpec | int, action_space: spaces.Space, cfg: PolicyConfig
    ) -> None:
        super().__init__()
        if isinstance(action_space, spaces.Discrete):
            self.discrete, self.action_dim, out_dim = True, 1, int(action_space.n)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.discrete, self.action_dim = False, int(action_space.shape[0])
            out_dim = self.action_dim
            self.log_std = nn.Parameter(torch.full((out_dim,), cfg.init_log_std))
        else:
            raise ValueError(f"unsupported action space {action_space}: need Discrete or 1-D Box")
        self.actor_out_dim = out_dim
        self._read_observations(obs_spec, cfg, with_critic=self.has_critic)
        self.actor = _mlp(self.actor_reader.out_dim, out_dim, cfg, out_gain=0.01)

    @property
    def network_device(self) -> torch.device:
        """Where the networks (and so the sampling noise) live."""
        return next(self.actor.parameters()).device

    def _actor_out(self, obs: Observation) -> torch.Tensor:
        return self.actor(self.actor_reader(self.inputs.normalized(obs)))

    def _networks(self) -> list[nn.Sequential]:
        return [self.actor]

    def activation_bytes_per_sample(self) -> int:
        """Estimated bytes one sample's forward + backward keeps alive during an update.

        Per network: every layer's output and its activation output, saved for backward;
        plus its input and that input's gradient, and its image encoders' activations.
        Against the peak memory of PPO updates measured on CPU it errs on the large side,
        the safe side for sizing micro-batches (`benchmarks.update_memory` measures it).
        """
        readers = [r for r in (self.actor_reader, self.critic_reader) if r is not None]
        floats = 2 * max(r.out_dim for r in readers)  # the (widest) input and its gradient
        for net in self._networks():
            floats += 2 * sum(m.out_features for m in net if isinstance(m, nn.Linear))
        return 4 * floats + sum(r.activation_bytes_per_sample() for r in readers)

    def sampling_noise(
        self, batch: int, generator: torch.Generator | None, device: torch.device
    ) -> torch.Tensor:
        """The random draws `act` makes for `batch` observations: uniform ones for Gumbel-max
        sampling (discrete actions), standard normal ones otherwise. Drawn apart from the
        networks so that `act_with_noise` is a pure tensor function (what the collector
        compiles; a generator cannot enter compiled code).

        Shape: [batch, actions] (discrete) or [batch, action_dim]
        """
        shape = (batch, self.actor_out_dim)
        if self.discrete:
            return torch.rand(shape, generator=generator, device=device)
        return torch.randn(shape, generator=generator, device=device)

    def _sample(self, out: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            # Gumbel-max sampling: argmax(logits + Gumbel noise) ~ Categorical(logits).
            log_probs = out.log_softmax(-1)
            action = (log_probs - (-noise.clamp_min(1e-20).log()).log()).argmax(-1)
            return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        action = torch.addcmul(out, noise, self.log_std.exp())
        log_prob = (-0.5 * noise.square() - self.log_std - _HALF_LOG_2PI).sum(-1)
        return action, log_prob

    def act(self, obs: Observation, generator: torch.Generator | None = None) -> ActOutput:
        """Sample actions for a batch of observations (collection; call without grad).

        Shape:
            obs: entries [B, ...]; action: [B] int64 or [B, action_dim]; log_prob, value: [B]
        """
        noise = self.sampling_noise(batch_size(obs), generator, self.network_device)
        return self.act_with_noise(obs, noise)

    def act_with_noise(self, obs: Observation, noise: torch.Tensor) -> ActOutput:
        """`act` with its random draws given (`sampling_noise`): a pure tensor function."""
        action, log_prob = self._sample(self._actor_out(obs), noise)
        return ActOutput(action, log_prob, None)

    def act_deterministic(self, obs: Observation) -> torch.Tensor:
        """Return the mode of the action distribution (evaluation, video)."""
        out = self._actor_out(obs)
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

    def _actor_and_aux(
        self, x: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The actor's output for normalised entries `x`, and the auxiliary loss (if any)."""
        if self.aux_head is None:
            return self.actor(self.actor_reader(x)), None
        features, images = self.actor_reader.read_with_images(x)
        return self.actor(features), self.aux_loss(x, images)

    def evaluate(self, obs: Observation, action: torch.Tensor) -> EvalOutput:
        """Log-probability and entropy of given actions, with gradients (the update)."""
        out, aux = self._actor_and_aux(self.inputs.normalized(obs))
        log_prob, entropy = self._log_prob_entropy(out, action)
        return EvalOutput(log_prob, entropy, None, aux)


class ActorCritic(Actor):
    """Separate actor and critic MLPs over shared observation normalisers (PPO); each
    reads its own entries (an asymmetric critic reads privileged state the actor never
    sees)."""

    has_critic = True

    critic_reader: ObservationReader

    def __init__(
        self, obs_spec: ObsSpec | int, action_space: spaces.Space, cfg: PolicyConfig
    ) -> None:
        super().__init__(obs_spec, action_space, cfg)
        self.critic = _mlp(self.critic_reader.out_dim, 1, cfg, out_gain=1.0)

    def _networks(self) -> list[nn.Sequential]:
        return [self.actor, self.critic]

    def value(self, obs: Observation) -> torch.Tensor:
        """State values. Shape: obs entries [B, ...] -> [B]."""
        return self.critic(self.critic_reader(self.inputs.normalized(obs))).squeeze(-1)

    def act_with_noise(self, obs: Observation, noise: torch.Tensor) -> ActOutput:
        """`Actor.act_with_noise`, with the critic's values of `obs` too (GAE's `value`)."""
        x = self.inputs.normalized(obs)
        action, log_prob = self._sample(self.actor(self.actor_reader(x)), noise)
        return ActOutput(action, log_prob, self.critic(self.critic_reader(x)).squeeze(-1))

    def evaluate(self, obs: Observation, action: torch.Tensor) -> EvalOutput:
        """`Actor.evaluate`, with the critic's values for the value loss; the observations
        are normalised once for both networks."""
        x = self.inputs.normalized(obs)
        out, aux = self._actor_and_aux(x)
        log_prob, entropy = self._log_prob_entropy(out, action)
        return EvalOutput(log_prob, entropy, self.critic(self.critic_reader(x)).squeeze(-1), aux)


def make_policy(
    obs_spec: ObsSpec, action_space: spaces.Space, cfg: PolicyConfig, with_critic: bool
) -> Actor:
    """Build an actor-critic (algorithms with a value function) or an actor-only policy."""
    return (ActorCritic if with_critic else Actor)(obs_spec, action_space, cfg)


# The builtin algorithms' policy factories (`AlgorithmSpec.policy`): evaluation and videos
# build the trained policy from these without importing the algorithms' training code.
def actor_critic_policy(
    obs_spec: ObsSpec, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> ActorCritic:
    """PPO's: an actor-critic, since PPO learns a value function for its advantages."""
    return ActorCritic(obs_spec, action_space, policy)


def actor_policy(
    obs_spec: ObsSpec, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> Actor:
    """GRPO's: an actor alone, GRPO being critic-free."""
    return Actor(obs_spec, action_space, policy)


def squashed_gaussian_policy(
    obs_spec: ObsSpec, action_space: spaces.Space, policy: PolicyConfig, cfg: object
) -> SquashedGaussianActor:
    """SAC's squashed Gaussian actor; it needs a bounded 1-D Box action space."""
    if policy.aux_obs:
        raise ConfigError(
            f"policy.aux_obs {list(policy.aux_obs)}: SAC's critics train its image encoder, "
            f"and this auxiliary loss is PPO's and GRPO's: drop aux_obs for sac"
        )
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
    return SquashedGaussianActor(obs_spec, action_space, policy)


def _log_squash_jacobian(pre_tanh: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2), summed over action dims, in the overflow-free form
    2 (log 2 - u - softplus(-2u))."""
    return (2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))).sum(-1)


class SquashedGaussianActor(ReadsObservations):
    """A tanh-squashed Gaussian policy over a bounded Box (SAC; Haarnoja et al., 2018).

    The network outputs a mean and a state-dependent log-std; actions are
    `tanh(u) * scale + bias` for `u ~ N(mean, std)`, so they always lie in the Box, and the
    log-probability carries the change-of-variables correction of the squashing. The
    normalisers (`normalize_obs`) are shared with the critics, which read the entries of
    `critic_keys` (`features`).
    """

    has_critic = False
    discrete = False
    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
    critic_reader: ObservationReader

    def __init__(self, obs_spec: ObsSpec | int, action_space: spaces.Box, cfg: PolicyConfig):
        super().__init__()
        self.action_dim = int(action_space.shape[0])
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)
        # One encoder per image entry, trained by the critics, read by the actor (DrQ-v2).
        self._read_observations(obs_spec, cfg, with_critic=True, share_images=True)
        layers: list[nn.Module] = []
        in_dim = self.actor_reader.out_dim
        for size in cfg.hidden_sizes:
            layers += [nn.Linear(in_dim, size), ACTIVATIONS[cfg.activation]()]
            in_dim = size
        self.actor = nn.Sequential(*layers, nn.Linear(in_dim, 2 * self.action_dim))

    def features(
        self, obs: Observation, detach_images: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's and the critics' inputs: their entries, normalised (images
        encoded), concatenated; `detach_images`: the encoders get no gradient from them."""
        x = self.inputs.normalized(obs)
        return self.actor_reader(x, detach_images), self.critic_reader(x, detach_images)

    def _actor_input(self, obs: Observation) -> torch.Tensor:
        return self.actor_reader(self.inputs.normalized(obs))

    def _mean_log_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Under bf16 autocast (SAC's `precision`) the sampling math stays in x's dtype.
        mean, log_std = self.actor(x).to(x.dtype).chunk(2, dim=-1)
        return mean, log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def sample_normalized(
        self,
        x: torch.Tensor,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised squashed actions in [-1, 1] and their log-probabilities, with
        gradients, from the actor's input (`features`; the SAC losses).

        `noise`: the standard normal draws to use (a compiled update draws them outside,
        from `generator`, in the same order), else drawn here.

        Shape:
            x: [B, actor input]; noise: [B, action_dim]; returns [B, action_dim] and [B]
        """
        mean, log_std = self._mean_log_std(x)
        if noise is None:
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

    def act(self, obs: Observation, generator: torch.Generator | None = None) -> ActOutput:
        """Sample Box actions (collection; call without grad). Shape: entries [B, ...]."""
        squashed, log_prob = self.sample_normalized(self._actor_input(obs), generator)
        return ActOutput(self.to_env(squashed), log_prob, None)

    def act_deterministic(self, obs: Observation) -> torch.Tensor:
        """The squashed mean action (evaluation, video)."""
        mean, _ = self._mean_log_std(self._actor_input(obs))
        return self.to_env(mean.tanh())


class UniformRandomPolicy(nn.Module):
    """Uniform actions over a bounded Box: the off-policy warm-up's behaviour policy."""

    has_critic = False

    def __init__(self, action_space: spaces.Box) -> None:
        super().__init__()
        self.action_dim = int(action_space.shape[0])
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("low", low)
        self.register_buffer("width", high - low)

    def act(self, obs: Observation, generator: torch.Generator | None = None) -> ActOutput:
        n, device = batch_size(obs), self.low.device
        u = torch.rand((n, self.low.shape[0]), generator=generator, device=device)
        action = torch.addcmul(self.low, u, self.width)
        return ActOutput(action, torch.zeros(n, device=device), None)
