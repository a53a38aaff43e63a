"""An rlcore `BatchedEnv` as a Stable-Baselines3 `VecEnv`, and rlcore's image encoders as
an SB3 features extractor: SB3 trains on our envs as they are, with our networks' inputs.

    from benchmarks.sb3_vec_env import BatchedVecEnv
    venv = BatchedVecEnv(PushCubePixels(64), keys=("image", "proprio"))
    PPO("MultiInputPolicy", venv, ...)

The adapter speaks SB3's VecEnv API (numpy in and out) over the env's tensors:

- observations: a dict of numpy arrays, one per entry (a flat `Box` env: its one array),
  dtypes kept (uint8 images `[N, C, H, W]`, float32 vectors); `keys` keeps only the entries
  named (SB3 has no asymmetric critic: give it what the actor reads). `observation_space` is
  a gymnasium `Dict` of those entries' `Box`es, or the env's `Box`. Channel-first uint8
  images with bounds 0-255 pass SB3's `is_image_space` as they are, so SB3 wraps nothing in
  `VecTransposeImage`.
- `step` returns `(obs, rewards, dones, infos)` as SB3's `DummyVecEnv` does: rewards
  float32 (times `reward_scale`), `dones = terminated | truncated`; an instance that is done
  was already reset by the env, its `obs` row is the new episode's first observation and its
  info holds `terminal_observation` (the true last observation, from `env.final_obs`),
  `TimeLimit.truncated` (truncated and not terminated: SB3 bootstraps those), `is_success`
  (envs with `has_success`: whether the episode succeeded) and `episode` (unscaled return,
  length and seconds, as SB3's `Monitor` writes it: SB3's `ep_rew_mean` / `ep_success_rate`).
- `reset` seeds the env from `seed()` (the first instance's seed: a batched env has one
  generator); `get_images` renders every instance; `get_attr` / `set_attr` / `env_method`
  act on the one batched env (a method runs once and its result is repeated per instance).

Returned arrays are fresh copies: SB3 keeps the previous step's observation until after the
next step (`_last_obs`), so views of the env's reused storage would be overwritten under it.
Envs with `has_invalid_steps` (a Gymnasium next-step vector env through the bridge) are
refused: their steps after an episode's end are no transitions, which SB3 cannot skip.

`EncoderExtractor` is SB3's `features_extractor_class` for a `MultiInputPolicy` that reads
what an rlcore policy reads: each image entry through an rlcore `ImageEncoder` of the kind
and width the `PolicyConfig` gives, vector entries as they are, concatenated in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium.spaces as spaces
import numpy as np
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
from torch import nn

from rlcore.config import PolicyConfig
from rlcore.encoders import ImageEncoder
from rlcore.envs.base import BatchedEnv, StepSlot
from rlcore.observations import FLAT_KEY, is_flat, obs_spec
from rlcore.policy_inputs import encoder_kind


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy copy of `tensor` (on the host), sharing no memory with it."""
    array = tensor.numpy(force=True)
    return array.copy() if tensor.device.type == "cpu" else array


class BatchedVecEnv(VecEnv):
    """SB3's `VecEnv` over an rlcore `BatchedEnv` (module docstring).

    `keys`: the observation entries SB3 sees (None: all of them; ignored for a flat env).
    `reward_scale`: rewards are multiplied by it (like rlcore's `ppo.reward_scale`).
    """

    def __init__(
        self,
        env: BatchedEnv,
        keys: Iterable[str] | None = None,
        reward_scale: float = 1.0,
    ) -> None:
        if env.has_invalid_steps:
            raise ValueError(
                f"{type(env).__name__} has invalid steps (a next-step reset): SB3 would learn "
                "from them; build it with a same-step reset"
            )
        self.env = env
        self.flat = is_flat(env.obs_spec)
        space = env.observation_space
        if self.flat:
            self.keys: tuple[str, ...] = (FLAT_KEY,)
            observation_space: spaces.Space = space
        else:
            assert isinstance(space, spaces.Dict)
            self.keys = tuple(space.spaces) if keys is None else tuple(keys)
            unknown = [k for k in self.keys if k not in space.spaces]
            if unknown or not self.keys or len(set(self.keys)) != len(self.keys):
                raise ValueError(
                    f"keys must name entries of {list(space.spaces)}, each once; got "
                    f"{list(self.keys)}"
                )
            observation_space = spaces.Dict({k: space.spaces[k] for k in self.keys})
        self.reward_scale = reward_scale
        self.discrete = isinstance(env.action_space, spaces.Discrete)
        self.slot = StepSlot.allocate(
            env.num_envs, env.obs_spec, env.device, with_success=env.has_success
        )
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(env.num_envs, np.float64)
        self._lengths = np.zeros(env.num_envs, np.int64)
        self._success = np.zeros(env.num_envs, bool)
        self._start = time.perf_counter()
        super().__init__(env.num_envs, observation_space, env.action_space)

    # --- observations ------------------------------------------------------------------

    def _obs(self, obs: Any) -> VecEnvObs:
        """The SB3 observation of all instances: a dict of the kept entries (or one array)."""
        if self.flat:
            return _numpy(obs[FLAT_KEY])
        return {key: _numpy(obs[key]) for key in self.keys}

    def _row(self, arrays: VecEnvObs, index: int) -> VecEnvObs:
        if isinstance(arrays, dict):
            return {key: value[index] for key, value in arrays.items()}
        return arrays[index]  # type: ignore[index]

    # --- the VecEnv API ----------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        obs = self.env.reset(seed=self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._success[:] = False
        return self._obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async()")
        dtype = torch.int64 if self.discrete else torch.float32
        action = torch.as_tensor(self._actions, dtype=dtype, device=self.env.device)
        if self.discrete:
            action = action.reshape(self.num_envs)
        self._actions = None
        slot = self.slot
        self.env.step(action, slot)
        obs = self._obs(slot.next_obs)
        rewards = _numpy(slot.reward).astype(np.float32, copy=False)
        self._returns += rewards  # unscaled, as SB3's Monitor records them
        if self.reward_scale != 1.0:
            rewards *= np.float32(self.reward_scale)
        dones = _numpy(slot.done)
        self._lengths += 1
        if slot.success is not None:
            self._success |= _numpy(slot.success)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        done_ids = np.flatnonzero(dones)
        if done_ids.size:
            ids = torch.as_tensor(done_ids, device=self.env.device)
            final = self._obs(self.env.final_obs[ids])
            terminated = _numpy(slot.terminated)
            truncated = _numpy(slot.truncated)
            elapsed = time.perf_counter() - self._start
            for row, i in enumerate(done_ids):
                info = infos[i]
                info["terminal_observation"] = self._row(final, row)
                info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                info["episode"] = {
                    "r": float(self._returns[i]),
                    "l": int(self._lengths[i]),
                    "t": round(elapsed, 6),
                }
                if slot.success is not None:
                    info["is_success"] = bool(self._success[i])
            self._returns[done_ids] = 0.0
            self._lengths[done_ids] = 0
            self._success[done_ids] = False
        return obs, rewards, dones, infos

    def close(self) -> None:
        self.env.close()

    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        # SB3 asks for `render_mode` on construction; our envs render on request (None).
        value = None if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if len(self._indices(indices)) != self.num_envs:
            raise ValueError("a batched env's attributes are shared: set them for all instances")
        setattr(self.env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return list(_numpy(self.env.render()))


class EncoderExtractor(BaseFeaturesExtractor):
    """SB3 features extractor over a `Dict` space with an rlcore policy's inputs.

    `keys` (default: the space's): the entries read, in order; an image entry goes through
    an `ImageEncoder` of the kind `policy.encoders` names (else rlcore's default for its
    size) and `policy.image_features` wide, a vector entry is passed as it is (normalise it
    with SB3's `VecNormalize`, as `policy.normalize_obs` would). The output is what an rlcore
    `ObservationReader` over the same keys computes, fed to SB3's MLPs.

    SB3 preprocesses observations before the extractor: a uint8 image space (bounds 0-255)
    arrives as float divided by 255 (`normalize_images=True`, SB3's default), which is what
    `ImageEncoder.forward` does first with uint8 images; the encoder's layers then run on it
    as they do inside `forward` (minus the kind's center), so the numbers are the same.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        keys: Sequence[str] | None = None,
        policy: PolicyConfig | None = None,
    ) -> None:
        policy = policy or PolicyConfig()
        spec = obs_spec(observation_space)
        keys = tuple(spec) if keys is None else tuple(keys)
        encoders = {}
        width = 0
        for key in keys:
            kind = encoder_kind(key, spec[key], policy)
            if kind == "mlp":
                width += spec[key].shape[0]
            else:
                encoders[key] = ImageEncoder(spec[key].shape, kind, policy.image_features)
                width += policy.image_features
        super().__init__(observation_space, features_dim=width)
        self.keys = keys
        self.encoders = nn.ModuleDict(encoders)
        self._plan = tuple((key, encoders.get(key)) for key in keys)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for key, encoder in self._plan:
            x = observations[key]
            if encoder is not None:  # float images in [0, 1]: ImageEncoder.forward after /255
                x = encoder.trunk(encoder.convs(x - encoder.center if encoder.center else x))
            parts.append(x)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
