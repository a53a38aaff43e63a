"""PPO on MuJoCo locomotion (HalfCheetah, Hopper): final return at 1M env steps, through the
Gymnasium bridge and natively, beside Stable-Baselines3 with RL Zoo's settings.

Run from the repository root (needs `pip install -e ".[mujoco]"`; `sb3` the `bench` extra):

    .venv/bin/python -m benchmarks.locomotion --task halfcheetah --seeds 0 1 2
    .venv/bin/python -m benchmarks.locomotion --task hopper --backends native sb3 --seeds 0
    .venv/bin/python -m benchmarks.halfcheetah --seeds 0  # the same as --task halfcheetah

Per seed, trains each backend side by side (`--task` picks the presets and RL Zoo's entry):

- gym: the task's Gymnasium preset (`gym_halfcheetah`, `gym_hopper`), Gymnasium's `-v5`
  env through the bridge (8 sync envs). HalfCheetah's is RL Zoo's tuned PPO with its 512
  env steps per iteration batched as 8 envs x 64 steps and learnt from in 4 minibatches of
  128 (ReLU 256x256, log-std -2, observation and return normalisation, 20 epochs, lr
  2.06e-5, gamma 0.98, ...); Hopper's is the best trial of the platform's own study
  (search/mujoco_hopper-ppo.yaml);
- native: the same experiment on the native env (`mujoco_halfcheetah`, `mujoco_hopper`:
  mujoco.batch, rlcore.envs.mujoco_batch);
- native-compiled: the native run with its PPO loss through `torch.compile`
  (`Trainer(compile_loss=True)`, `runtime.compile` in params.yaml); compiling is part of
  its first update's time;
- native-compiled-bf16: native-compiled with `algorithm.ppo.precision: bfloat16` (the
  hidden layers' matrix products of the update in bf16);
- native-rlzoo: our PPO with RL Zoo's settings unbatched on the native env (the first trial
  the task's study enqueues, `search/mujoco_<task>-ppo.yaml`: 1 env x 512 steps);
  `--zoo-set PATH=VALUE` changes them (how the HalfCheetah presets' batching was found),
  `--zoo-file best_params.yaml` by a study's best trial;
- sb3: Stable-Baselines3 PPO with RL Zoo's tuned settings for the task (`normalize: true`,
  i.e. VecNormalize of observations and rewards; 1 env x 512 steps; ReLU 256x256, log-std
  -2), on the `-v5` env, after the other backends of the seed (SB3 cannot take turns);
  evaluated on 10 deterministic episodes with its frozen observation statistics.

Side by side means interleaved: with both backends, the two trainers of a seed take turns,
one training iteration (and its evaluation, when due) each, in one process. Each backend's
wall time is the sum of its own turns plus its construction. Drifts in the machine's speed
(on this shared machine up to 1.5x within an hour, against a few per cent between the
backends) then fall on both alike instead of on whichever ran second. A trainer draws only
from its own generators, so taking turns changes none of its results.

Reports the last evaluation's mean return over 10 deterministic episodes, the env steps and
the wall time (evaluation included), split into collection, update and evaluation.
Targets (issue 24): mean return >= 5,000 on HalfCheetah (RL Zoo reports ~5,800 for its PPO;
CleanRL's untuned PPO 1,442.6 +- 46) and >= 3,200 on Hopper at 1M steps; wall time <= 0.5x
SB3's with RL Zoo's settings; native faster than gym.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import base_parser, mean_std, print_table, setup, verdict, write_json
from pipelines.params import apply_values, flatten_paths, parse_params
from pipelines.search.space import search_section
from rlcore.config import ExperimentConfig
from rlcore.presets import PRESETS
from rlcore.trainer import Trainer

SEARCH_DIR = Path(__file__).resolve().parents[1] / "search"
EVAL_EPISODES = 10


@dataclass(frozen=True)
class Task:
    """One locomotion task: our presets per backend, RL Zoo's PPO for SB3, the target."""

    name: str
    gym_preset: str
    native_preset: str
    gym_id: str  # SB3's env
    zoo_ppo: dict[str, Any]  # RL Zoo's hyperparams/ppo.yml entry, as SB3 PPO arguments
    target_return: float

    def preset(self, backend: str) -> str:
        return self.gym_preset if backend == "gym" else self.native_preset

    @property
    def search_file(self) -> Path:
        """The task's PPO study: its first enqueued trial is RL Zoo's settings (native-rlzoo)."""
        return SEARCH_DIR / f"{self.native_preset}-ppo.yaml"


# RL Zoo's hyperparams/ppo.yml (the v3/v4 entries; the same tasks as v5). Both also set
# normalize: true and policy_kwargs log_std_init -2, ortho_init False, ReLU, 256x256.
TASKS = {
    "halfcheetah": Task(
        "halfcheetah", "gym_halfcheetah", "mujoco_halfcheetah", "HalfCheetah-v5",
        {"n_steps": 512, "batch_size": 64, "gamma": 0.98, "learning_rate": 2.0633e-05,
         "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.92,
         "max_grad_norm": 0.8, "vf_coef": 0.58096},
        target_return=5000.0,
    ),
    "hopper": Task(
        "hopper", "gym_hopper", "mujoco_hopper", "Hopper-v5",
        {"n_steps": 512, "batch_size": 32, "gamma": 0.999, "learning_rate": 9.80828e-05,
         "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
         "max_grad_norm": 0.7, "vf_coef": 0.835671},
        target_return=3200.0,
    ),
}  # fmt: skip
BACKENDS = ["gym", "native", "native-compiled", "native-compiled-bf16", "native-rlzoo", "sb3"]


def run_sb3(task: Task, seed: int, total_steps: int) -> dict[str, Any]:
    """SB3 PPO with RL Zoo's settings for `task`; wall time of construction and learning."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    start = time.perf_counter()
    env = VecNormalize(make_vec_env(task.gym_id, n_envs=1, seed=seed), gamma=task.zoo_ppo["gamma"])
    policy_kwargs = {"log_std_init": -2, "ortho_init": False, "activation_fn": nn.ReLU,
                     "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
    model = PPO("MlpPolicy", env, policy_kwargs=policy_kwargs, device="cpu", seed=seed,
                verbose=0, **task.zoo_ppo)  # fmt: skip
    model.learn(total_timesteps=total_steps)
    wall = time.perf_counter() - start
    eval_env = VecNormalize(
        make_vec_env(task.gym_id, n_envs=1, seed=seed + 10_000), training=False,
        norm_reward=False,
    )  # fmt: skip
    eval_env.obs_rms = env.obs_rms
    start = time.perf_counter()
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    eval_s = time.perf_counter() - start
    env.close()
    eval_env.close()
    return {"backend": "sb3", "seed": seed, "env_steps": int(model.num_timesteps),
            "wall_s": wall + eval_s, "collect_s": float("nan"), "update_s": float("nan"),
            "eval_s": eval_s, "eval_return": float(mean)}  # fmt: skip


FIGURES = ("env_steps", "wall_s", "collect_s", "update_s", "eval_s", "eval_return")


def rlzoo_config(task: Task, changes: dict[str, Any] | None = None) -> ExperimentConfig:
    """Our PPO with RL Zoo's settings for `task` on the native env: the first trial that
    the task's study enqueues, evaluated on 10 episodes every ~100k steps; `changes`
    (params paths -> values) on top."""
    data = yaml.safe_load(task.search_file.read_text())
    params = parse_params(data)
    search = search_section(params)
    zoo = search.enqueue[0]
    cfg = apply_values(params, {**search.overrides, **zoo, **(changes or {})}).experiment()
    every = max(1, 100_000 // cfg.steps_per_iter)
    return dataclasses.replace(
        cfg, trainer=dataclasses.replace(cfg.trainer, eval_every_iters=every)
    )


class TimedRun:
    """One backend's trainer for one seed, advanced a turn (one iteration) at a time, with
    the seconds spent in its own turns."""

    def __init__(
        self,
        task: Task,
        backend: str,
        seed: int,
        total_steps: int,
        zoo_changes: dict[str, Any] | None = None,
    ) -> None:
        if backend == "native-rlzoo":
            base = rlzoo_config(task, zoo_changes)
        else:
            base = PRESETS[task.preset(backend)]
        trainer = dataclasses.replace(
            base.trainer, seed=seed, total_env_steps=total_steps, eval_episodes=EVAL_EPISODES
        )
        cfg = dataclasses.replace(base, trainer=trainer)
        if backend.endswith("-bf16"):
            cfg = dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, precision="bfloat16"))
        self.backend, self.seed = backend, seed
        self.split = {"collect_s": 0.0, "update_s": 0.0, "eval_s": 0.0}
        start = time.perf_counter()
        compile_loss = "-compiled" in backend
        self.trainer = Trainer(cfg, sink=self._record, compile_loss=compile_loss)
        self.wall_s = time.perf_counter() - start
        self.finished = False
        self._turn_start = 0.0

    def _record(self, step: int, metrics: dict[str, float]) -> None:
        for key in self.split:
            self.split[key] += metrics.get(f"time/{key}", 0.0)
        if "eval/episode_return" in metrics:
            elapsed = self.wall_s + time.perf_counter() - self._turn_start
            print(f"    {self.backend:>15} {step:>9,d} steps  {elapsed:6.1f} s  "
                  f"eval return {metrics['eval/episode_return']:8.1f}", flush=True)  # fmt: skip

    def turn(self) -> None:
        """Train one more iteration (evaluating when due); `finished` once the budget is spent."""
        self._turn_start = time.perf_counter()
        result = self.trainer.run(max_iters=1)
        self.wall_s += time.perf_counter() - self._turn_start
        self.finished = result.reached_target or self.trainer.iteration >= self.trainer.total_iters
        if self.finished:
            self.close()

    def close(self) -> None:
        """Release the envs (idempotent)."""
        self.trainer.env.close()
        self.trainer.eval_env.close()

    def row(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "seed": self.seed,
            "env_steps": self.trainer.env_steps,
            "wall_s": self.wall_s,
            **self.split,
            "eval_return": self.trainer.last_eval["eval/episode_return"],
        }


def run_side_by_side(
    task: Task,
    backends: list[str],
    seed: int,
    total_steps: int,
    zoo_changes: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Train every backend on `seed`, taking turns one iteration at a time."""
    runs: list[TimedRun] = []
    try:
        for backend in backends:
            runs.append(TimedRun(task, backend, seed, total_steps, zoo_changes))
        while not all(run.finished for run in runs):
            for run in runs:
                if not run.finished:
                    run.turn()
    finally:
        for run in runs:
            run.close()
    return [run.row() for run in runs]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="halfcheetah")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["gym"])
    parser.add_argument(
        "--zoo-set", nargs="+", default=[], metavar="PATH=VALUE",
        help="native-rlzoo: change RL Zoo's settings, e.g. env.num_envs=8 (values as YAML)",
    )  # fmt: skip
    parser.add_argument(
        "--zoo-file", type=Path, default=None, metavar="YAML",
        help="native-rlzoo: change RL Zoo's settings by a params fragment, e.g. a study's "
        "best_params.yaml (--zoo-set on top)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    task = TASKS[args.task]
    zoo_changes = {}
    if args.zoo_file is not None:
        fragment = yaml.safe_load(args.zoo_file.read_text()) or {}
        zoo_changes = flatten_paths(fragment, is_leaf=lambda v: False)
    for item in args.zoo_set:
        path, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--zoo-set takes PATH=VALUE, got {item!r}")
        zoo_changes[path] = yaml.safe_load(value)
    if importlib.util.find_spec("mujoco") is None:
        raise SystemExit('mujoco is not installed: pip install -e ".[mujoco]"')
    backends = list(dict.fromkeys(args.backends))
    meta = setup(
        args,
        f"locomotion: {task.name}",
        method=f"one run per seed {args.seeds}, backends {backends} taking turns one "
        "iteration each (--reps unused)",
    )
    rows = []
    for seed in args.seeds:
        ours = [b for b in backends if b != "sb3"]
        names = ", ".join(f"{b} ({PRESETS[task.preset(b)].env.name})" for b in ours)
        print(f"... seed {seed}: {names}", flush=True)
        if ours:
            rows.extend(run_side_by_side(task, ours, seed, args.total_steps, zoo_changes))
        if "sb3" in backends:
            print(f"... seed {seed}: sb3 (RL Zoo PPO, {task.gym_id})", flush=True)
            rows.append(run_sb3(task, seed, args.total_steps))
    summary = []
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        summary.append({
            "backend": backend, "seed": "median",
            **{k: statistics.median(r[k] for r in mine) for k in FIGURES},
        })  # fmt: skip
    print()
    print_table(
        [*rows, *summary],
        [("backend", "backend", ""), ("seed", "seed", ""), ("env_steps", "env steps", ",.0f"),
         ("wall_s", "wall s", ".1f"), ("collect_s", "collect s", ".1f"),
         ("update_s", "update s", ".1f"), ("eval_s", "eval s", ".1f"),
         ("eval_return", "eval return", ",.1f")],
    )  # fmt: skip
    print()
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        mean, std = mean_std([r["eval_return"] for r in mine])
        wall, wall_std = mean_std([r["wall_s"] for r in mine])
        target = task.target_return
        print(f"{backend}: eval return over seeds {mean:,.1f} +- {std:,.1f} (target >= "
              f"{target:,.0f}): {verdict(mean, target, True)}; wall time "
              f"{wall:,.1f} +- {wall_std:,.1f} s")  # fmt: skip
    for seed in args.seeds:
        mine = {r["backend"]: r for r in rows if r["seed"] == seed}
        for backend in (b for b in mine if b != "sb3" and "sb3" in mine):
            ratio = mine[backend]["wall_s"] / mine["sb3"]["wall_s"]
            print(f"seed {seed}: {backend} / sb3 wall time {ratio:.3f} (target <= 0.5): "
                  f"{verdict(ratio, 0.5, False)}")  # fmt: skip
    for seed in args.seeds:
        mine = {r["backend"]: r for r in rows if r["seed"] == seed}
        if {"gym", "native"} <= mine.keys():
            ratio = mine["native"]["wall_s"] / mine["gym"]["wall_s"]
            print(f"seed {seed}: native / gym wall time {ratio:.3f} (target < 1): "
                  f"{verdict(ratio, 1.0, False)}")  # fmt: skip
        for variant in ("native-compiled", "native-compiled-bf16"):
            if {"native", variant} <= mine.keys():
                compiled, eager = mine[variant], mine["native"]
                print(f"seed {seed}: {variant} / eager native wall time "
                      f"{compiled['wall_s'] / eager['wall_s']:.3f}, update time "
                      f"{compiled['update_s'] / eager['update_s']:.3f}")  # fmt: skip
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
