"""What a policy's networks read: named observation entries, normalised or encoded.

Every network (actor, critic) names the entries it reads (`PolicyConfig.actor_obs`,
`critic_obs`) and concatenates them, in that order, into the input of its MLP:

- a float vector entry `[D]` goes in as it is, through its running normaliser
  (`normalize_obs`), one per entry and shared by every network that reads it;
- a uint8 image entry `[C, H, W]` goes through an image encoder (`rlcore.encoders`; /255
  inside), one per network, or one per entry shared by actor and critic
  (`share_image_encoder`). Images are never normalised by running statistics.

A flat env's one entry read by both networks is the plain MLP-over-normalised-vector policy
of before named entries, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rlcore.config import PolicyConfig
from rlcore.encoders import ImageEncoder, check_image_shape, min_image_size
from rlcore.errors import ConfigError
from rlcore.observations import FLAT_KEY, ObsEntry, ObsSpec, as_spec, describe, flat_dim

Observation = torch.Tensor | Mapping[str, torch.Tensor]
"""What a policy reads: named `[B, ...]` entries (a TensorDict or a dict), or a flat env's
`[B, D]` tensor."""

Moments = Callable[[torch.Tensor], tuple[float, torch.Tensor, torch.Tensor]]


def batch_size(obs: Observation) -> int:
    """Number of observations in a batch."""
    if isinstance(obs, torch.Tensor):
        return obs.shape[0]
    return next(iter(obs.values())).shape[0]


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
        """Standardise `obs` by the running moments, clipped to +-`clip`, in float32."""
        scale = (self.var + self.eps).rsqrt().float()
        return ((obs - self.mean.float()) * scale).clamp_(-self.clip, self.clip)


def encoder_kind(key: str, entry: ObsEntry, cfg: PolicyConfig) -> str:
    """The encoder of entry `key`: the one configured, else the default for its kind;
    `ConfigError` (one line, naming the entry) where the two do not fit."""
    kind = cfg.encoders.get(key)
    if entry.is_vector:
        if kind not in (None, "mlp"):
            raise ConfigError(
                f"policy.encoders.{key}: {kind!r} encodes images, and entry {key!r} is "
                f"{entry.describe()}, a vector: use 'mlp' (or leave it out)"
            )
        return "mlp"
    if entry.is_image:
        if kind == "mlp":
            raise ConfigError(
                f"policy.encoders.{key}: 'mlp' reads float vectors, and entry {key!r} is "
                f"{entry.describe()}, an image: use 'nature' or 'drq' (or leave it out)"
            )
        kind = kind or ("nature" if min(entry.shape[1:]) >= min_image_size("nature") else "drq")
        check_image_shape(key, entry.shape, kind)
        return kind
    raise ConfigError(
        f"observation entry {key!r} is {entry.describe()}: policies read float vectors [D] "
        f"and uint8 images [C, H, W]"
    )


def _aux_keys(spec: ObsSpec, cfg: PolicyConfig) -> tuple[str, ...]:
    """The entries `policy.aux_obs` names: float vectors of this env (`ConfigError`, one
    line naming the entry, otherwise)."""
    for key in cfg.aux_obs:
        if key not in spec:
            raise ConfigError(
                f"policy.aux_obs names {key!r}; this env's observation entries are "
                f"{describe(spec)}: name some of those"
            )
        if not spec[key].is_vector:
            raise ConfigError(
                f"policy.aux_obs: entry {key!r} is {spec[key].describe()}; the actor's image "
                f"features predict float vectors [D] (the privileged state, say)"
            )
    return tuple(cfg.aux_obs)


def _check_keys(spec: ObsSpec, keys: Sequence[str], who: str) -> tuple[str, ...]:
    missing = [key for key in keys if key not in spec]
    if missing or not keys:
        raise ConfigError(
            f"policy.{who}_obs names {list(keys)}; this env's observation entries are "
            f"{describe(spec)}: name some of those"
        )
    return tuple(keys)


def read_keys(spec: ObsSpec, cfg: PolicyConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The entries the actor and the critic read (see `PolicyConfig`)."""
    actor_default = [key for key, entry in spec.items() if not entry.privileged]
    actor = _check_keys(spec, cfg.actor_obs or actor_default, "actor")
    critic = _check_keys(spec, cfg.critic_obs or list(spec), "critic")
    return actor, critic


class ObservationReader(nn.Module):
    """One network's input: its entries, vectors as they are (already normalised by
    `ObservationInputs`) and images through their encoders, concatenated in order."""

    def __init__(self, spec: ObsSpec, keys: Sequence[str], encoders: Mapping[str, nn.Module]):
        super().__init__()
        self.keys = tuple(keys)
        self.encoders = nn.ModuleDict({key: encoders[key] for key in self.keys if key in encoders})
        # (key, encoder or None) per entry: the per-call path does no dict lookups.
        self._plan = tuple((key, encoders.get(key)) for key in self.keys)
        self.out_dim = sum(
            encoders[key].features if key in encoders else spec[key].shape[0] for key in self.keys
        )

    def forward(
        self, inputs: Mapping[str, torch.Tensor], detach_images: bool = False
    ) -> torch.Tensor:
        """The network's input; `detach_images`: the encoders get no gradient from it."""
        parts = []
        for key, enc in self._plan:
            if enc is None:
                parts.append(inputs[key])
            else:
                features = enc(inputs[key])
                parts.append(features.detach() if detach_images else features)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def read_with_images(
        self, inputs: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The network's input, and its image entries' features alone (concatenated, in
        order): what an auxiliary prediction (`PolicyConfig.aux_obs`) reads."""
        parts, images = [], []
        for key, enc in self._plan:
            if enc is None:
                parts.append(inputs[key])
            else:
                images.append(enc(inputs[key]))
                parts.append(images[-1])
        return torch.cat(parts, dim=-1), torch.cat(images, dim=-1)

    @property
    def image_features(self) -> int:
        """Width of this network's image features (0: it reads no image)."""
        return sum(enc.features for enc in self.encoders.values())

    def activation_bytes_per_sample(self) -> int:
        """The image encoders' share of a sample's activations (forward + backward)."""
        return sum(enc.activation_bytes_per_sample() for enc in self.encoders.values())


class ObservationInputs(nn.Module):
    """Running normalisers of the vector entries the policy reads (`normalize_obs`)."""

    def __init__(self, spec: ObsSpec, keys: Iterable[str], normalize: bool) -> None:
        super().__init__()
        self.keys = tuple(dict.fromkeys(keys))
        vectors = [key for key in self.keys if spec[key].is_vector]
        norms = {key: RunningNorm(spec[key].shape[0]) for key in vectors}
        self.norms = nn.ModuleDict(norms) if normalize else None
        self._plan = tuple(
            (key, None if self.norms is None or key not in self.norms else self.norms[key])
            for key in self.keys
        )

    def normalized(self, obs: Observation) -> dict[str, torch.Tensor]:
        """The entries read, vectors normalised (a tensor stands for the flat entry)."""
        if isinstance(obs, torch.Tensor):
            obs = {FLAT_KEY: obs}
        return {key: obs[key] if norm is None else norm(obs[key]) for key, norm in self._plan}

    @torch.no_grad()
    def merge(self, obs: Mapping[str, torch.Tensor], moments: Moments) -> None:
        """Merge the moments of a batch of observations into every normaliser; `moments`
        maps a `[..., D]` tensor to (count, mean, biased variance) (data-parallel ranks
        pool theirs)."""
        if self.norms is None:
            return
        for key, norm in self.norms.items():
            norm.merge(*moments(obs[key]))


class ReadsObservations(nn.Module):
    """A policy's observation side: the spec, what each network reads, the normalisers and
    the image encoders. Subclasses call `_read_observations` before building their MLPs."""

    obs_spec: dict[str, ObsEntry]
    inputs: ObservationInputs
    actor_reader: ObservationReader
    critic_reader: ObservationReader | None

    def _read_observations(
        self,
        obs_spec: ObsSpec | int,
        cfg: PolicyConfig,
        with_critic: bool,
        share_images: bool | None = None,
    ) -> None:
        """`share_images` overrides `cfg.share_image_encoder`."""
        self.obs_spec = spec = as_spec(obs_spec)
        actor_keys, critic_keys = read_keys(spec, cfg)
        kinds = {
            key: encoder_kind(key, spec[key], cfg)
            for key in dict.fromkeys(actor_keys + (critic_keys if with_critic else ()))
        }
        aux_keys = _aux_keys(spec, cfg)
        inputs = kinds | {key: "mlp" for key in aux_keys if key not in kinds}

        def image_encoders(keys: Sequence[str]) -> dict[str, nn.Module]:
            return {
                key: ImageEncoder(spec[key].shape, kinds[key], cfg.image_features)
                for key in keys
                if kinds[key] != "mlp"
            }

        actor_encoders = image_encoders(actor_keys)
        self.inputs = ObservationInputs(spec, inputs, cfg.normalize_obs)
        self.actor_reader = ObservationReader(spec, actor_keys, actor_encoders)
        self.aux_keys, self.aux_coef = aux_keys, cfg.aux_coef
        self.aux_head: nn.Linear | None = None
        if aux_keys:
            if not actor_encoders:
                raise ConfigError(
                    f"policy.aux_obs: {list(aux_keys)} are predicted from the actor's image "
                    f"features, and the actor reads no image (policy.actor_obs "
                    f"{list(actor_keys)}): name an image entry in actor_obs or drop aux_obs"
                )
            width = sum(spec[key].shape[0] for key in aux_keys)
            self.aux_head = nn.Linear(self.actor_reader.image_features, width)
        self.critic_reader = None
        if with_critic:
            share = cfg.share_image_encoder if share_images is None else share_images
            shared = actor_encoders if share else {}
            fresh = image_encoders([k for k in critic_keys if k not in shared])
            self.critic_reader = ObservationReader(spec, critic_keys, shared | fresh)

    def aux_loss(self, x: Mapping[str, torch.Tensor], images: torch.Tensor) -> torch.Tensor:
        """Mean squared error of the `aux_obs` entries (as normalised) predicted from the
        actor's image features `images`."""
        assert self.aux_head is not None
        target = torch.cat([x[key] for key in self.aux_keys], dim=-1)
        return (self.aux_head(images) - target).square().mean()

    def image_encoders(self) -> list[nn.Module]:
        """Every image encoder of the policy, each once."""
        readers = [r for r in (self.actor_reader, self.critic_reader) if r is not None]
        unique = {id(e): e for r in readers for e in r.encoders.values()}
        return list(unique.values())

    @property
    def actor_keys(self) -> tuple[str, ...]:
        """The observation entries the actor reads."""
        return self.actor_reader.keys

    @property
    def critic_keys(self) -> tuple[str, ...]:
        """The observation entries the critic reads (none for an actor-only policy)."""
        return () if self.critic_reader is None else self.critic_reader.keys

    @property
    def obs_dim(self) -> int:
        """A flat env's observation width (ValueError for named entries)."""
        return flat_dim(self.obs_spec)

    @property
    def obs_norm(self) -> nn.ModuleDict | None:
        """The running normalisers by entry (None without `normalize_obs`)."""
        return self.inputs.norms

    def normalize(self, obs: Observation) -> dict[str, torch.Tensor]:
        """The entries the networks read, vectors normalised."""
        return self.inputs.normalized(obs)

    def _load_from_state_dict(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        # Checkpoints from before named entries kept one normaliser, `obs_norm`, for what
        # is now the flat entry's.
        for buffer in ("mean", "var", "count"):
            old = f"{prefix}obs_norm.{buffer}"
            if old in state:
                state[f"{prefix}inputs.norms.{FLAT_KEY}.{buffer}"] = state.pop(old)
        super()._load_from_state_dict(state, prefix, *args)
