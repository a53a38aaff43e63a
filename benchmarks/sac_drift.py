"""Does the compiled SAC update drift from the eager one over many updates, beyond float rounding?

Run from the repository root:

    .venv/bin/python -m benchmarks.sac_drift   # HumanoidStandup's sizes, 1,000 updates
    .venv/bin/python -m benchmarks.sac_drift --obs-dim 17 --action-dim 6 --updates 1000
    .venv/bin/python -m benchmarks.sac_drift --env HumanoidStandup-v5 --updates 5000

One update from the same state agrees to float rounding (tests/rlcore/algos/test_sac.py), but
a run is ~100k updates, each starting where the last one's rounding left it. This trains
three copies of the MuJoCo family's SAC (`SAC_PRESETS["gym_locomotion"]`: 256x256, batch 128,
its lr and tau) from the same weights on the same batches, drawn from one fixed pool of
synthetic transitions (`--obs-dim`, `--action-dim`; rewards ~40 a step, HumanoidStandup's
order): eager; eager on each batch with its rows in another order (each row keeping its own
random draws: the same update, its sums added in another order); and compiled
(`runtime.compile`: on CPU one function with its own Adam). At each checkpoint it prints each
copy's distance from the eager one (relative, all parameters), its mean Q and temperature,
for the family's ReLU networks and for tanh ones (`--activations`). With `--env` the batches
are a real run's instead: eager SAC trains on that Gymnasium env with only `env.name` set,
and every batch it samples goes, with the same random draws, to the other two copies.

What it shows (benchmarks/README.md, *sac_drift*): compiled arithmetic rounds otherwise, and
where a rounding difference moves a ReLU unit's input across zero for one sample, that
sample's gradient through the unit switches on or off, so ReLU copies separate step by step
(smooth tanh copies stay at rounding's distance); the statistics stay together.
"""

from __future__ import annotations

import dataclasses

import gymnasium.spaces as spaces
import numpy as np
import torch
from tensordict import TensorDict

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.algos.sac import SAC
from rlcore.policies import SquashedGaussianActor
from rlcore.presets import SAC_PRESETS
from rlcore.replay import NEXT_OBS
from rlcore.rollout import ACTION, OBS, REWARD, TERMINATED

OBS_DIM, ACTION_DIM = 348, 17  # HumanoidStandup-v5's
POOL = 20_000
REORDERED = "eager, rows reordered"
COPIES = ("eager", REORDERED, "compiled")
CHECKPOINTS = (1, 10, 100, 300, 1_000, 2_000, 3_000, 5_000, 10_000)


def build(obs_dim: int, action_dim: int, compiled: bool, activation: str = "relu") -> SAC:
    """The family's SAC at these sizes (`activation` in every network), from fixed weights."""
    base = SAC_PRESETS["gym_locomotion"]
    policy = dataclasses.replace(base.policy, activation=activation)
    torch.manual_seed(1)
    box = spaces.Box(-np.ones(action_dim, np.float32), np.ones(action_dim, np.float32))
    actor = SquashedGaussianActor(obs_dim, box, policy)
    return SAC(
        actor, base.algo, base.algo.critic_hidden_sizes or policy.hidden_sizes, activation,
        torch.Generator().manual_seed(2), compile_update=compiled,
    )  # fmt: skip


class Reordered:
    """An eager SAC that updates on each batch with its rows permuted, each row keeping the
    random draws it has in the plain update (drawn in the same order, then permuted)."""

    def __init__(self, sac: SAC, seed: int = 3) -> None:
        self.sac, self.order = sac, torch.Generator().manual_seed(seed)
        self.rows: torch.Tensor | None = None
        draw = sac.actor.sample_normalized

        def permuted_draws(x: torch.Tensor, generator=None, noise=None):
            assert noise is None and self.rows is not None  # the eager update draws here
            mean_shape = (x.shape[0], sac.actor.action_dim)
            noise = torch.randn(mean_shape, generator=generator, device=x.device)[self.rows]
            return draw(x, generator, noise)

        sac.actor.sample_normalized = permuted_draws  # type: ignore[method-assign]

    def update(self, batch: TensorDict) -> torch.Tensor:
        self.rows = torch.randperm(batch.batch_size[0], generator=self.order)
        return self.sac.update(batch[self.rows])


def parameters(sac: SAC) -> list[torch.Tensor]:
    """Everything an update moves: actor, critics, temperature."""
    return [*sac.actor.parameters(), *sac.critic.parameters(), sac.log_alpha]


def flat(sac: SAC) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters(sac)])


class Transitions:
    """A fixed pool of synthetic transitions (each obs's successor the next row) and a
    seeded sampler of batches from it."""

    def __init__(self, obs_dim: int, action_dim: int, batch: int, pool: int = POOL) -> None:
        g = torch.Generator().manual_seed(0)
        self.obs = torch.randn(pool + 1, obs_dim, generator=g) * 3
        direction = torch.randn(obs_dim, generator=g) / obs_dim**0.5
        noise = torch.randn(pool, generator=g)
        self.reward = 40 + 10 * torch.tanh(self.obs[:-1] @ direction) + noise
        self.action = torch.rand(pool, action_dim, generator=g) * 2 - 1
        self.batch, self.pool = batch, pool
        self.sampler = torch.Generator().manual_seed(5)

    def sample(self) -> TensorDict:
        rows = torch.randint(0, self.pool, (self.batch,), generator=self.sampler)
        data = {
            OBS: self.obs[rows], NEXT_OBS: self.obs[rows + 1], ACTION: self.action[rows],
            REWARD: self.reward[rows], TERMINATED: torch.zeros(self.batch, dtype=torch.bool),
        }  # fmt: skip
        return TensorDict(data, batch_size=[self.batch])


def drift(
    updates: int,
    obs_dim: int,
    action_dim: int,
    activation: str = "relu",
    copies: tuple[str, ...] = COPIES,
) -> list[dict[str, float | int | str]]:
    """One row per (checkpoint, copy): relative distance from eager, mean Q, temperature."""
    names = list(dict.fromkeys(("eager", *copies)))
    runs = {name: build(obs_dim, action_dim, name == "compiled", activation) for name in names}
    updates_of = {
        name: Reordered(sac).update if name == REORDERED else sac.update
        for name, sac in runs.items()
    }
    data = Transitions(obs_dim, action_dim, SAC_PRESETS["gym_locomotion"].replay.batch_size)
    marks = {c for c in CHECKPOINTS if c <= updates} | {updates}
    rows: list[dict[str, float | int | str]] = []
    for step in range(1, updates + 1):
        batch = data.sample()
        stats = {name: update(batch) for name, update in updates_of.items()}
        if step not in marks:
            continue
        reference = flat(runs["eager"])
        for name, sac in runs.items():
            distance = ((flat(sac) - reference).norm() / reference.norm()).item()
            rows.append({
                "activation": activation, "update": step, "copy": name, "distance": distance,
                "q_mean": stats[name][4].item(), "alpha": stats[name][3].item(),
            })  # fmt: skip
        print(f"  update {step:,d} of {updates:,d}", flush=True)
    return rows


def real_drift(
    env_id: str, updates: int, copies: tuple[str, ...] = (REORDERED, "compiled")
) -> list[dict[str, float | int | str]]:
    """The same copies on a real run's batches: an eager run of the family's SAC on `env_id`
    (only `env.name` set, seed 0) trains, and every batch it samples goes, with the same
    random draws, to the reordered and the compiled copy too (from the run's first state)."""
    import copy

    import torch._inductor.config

    from benchmarks.env_defaults import params_for
    from rlcore.trainer import Trainer

    torch._inductor.config.compile_threads = 1
    base = SAC_PRESETS["gym_locomotion"]
    steps = base.replay.warmup_steps + updates  # one update per env step after the warm-up
    cfg = params_for(env_id, steps, "sac", {"runtime.compile": False}).experiment(seed=0)
    trainer_cfg = dataclasses.replace(cfg.trainer, seed=0, eval_every_iters=0)
    trainer = Trainer(dataclasses.replace(cfg, trainer=trainer_cfg))
    driver = trainer.algo

    def copied(compiled: bool) -> SAC:
        actor = copy.deepcopy(driver.actor)
        hidden = driver.cfg.critic_hidden_sizes or cfg.policy.hidden_sizes
        sac = SAC(
            actor,
            driver.cfg,
            hidden,
            cfg.policy.activation,
            torch.Generator(),
            compile_update=compiled,
        )
        sac.load_state_dict(copy.deepcopy(driver.state_dict()))
        return sac

    models = {name: copied(name == "compiled") for name in copies}
    updates_of = {
        name: Reordered(sac).update if name == REORDERED else sac.update
        for name, sac in models.items()
    }
    train_step = driver.update
    marks = {c for c in CHECKPOINTS if c <= updates}
    rows: list[dict[str, float | int | str]] = []
    done = [0]

    def update(batch: TensorDict) -> torch.Tensor:
        draws = driver.generator.get_state()
        stats = {"eager": train_step(batch)}
        for name, step in updates_of.items():
            models[name].generator.set_state(draws)
            stats[name] = step(batch)
        done[0] += 1
        if done[0] in marks:
            reference = flat(driver)
            for name, sac in {"eager": driver, **models}.items():
                distance = ((flat(sac) - reference).norm() / reference.norm()).item()
                rows.append({
                    "activation": f"relu, {env_id}", "update": done[0], "copy": name,
                    "distance": distance, "q_mean": stats[name][4].item(),
                    "alpha": stats[name][3].item(),
                })  # fmt: skip
            print(f"  update {done[0]:,d} of {updates:,d}", flush=True)
        return stats["eager"]

    driver.update = update  # type: ignore[method-assign]
    trainer.run()
    trainer.env.close()
    if trainer.eval_env is not None:
        trainer.eval_env.close()
    return rows


COLUMNS = [
    ("activation", "networks, batches", ""),
    ("update", "update", ",d"),
    ("copy", "copy", ""),
    ("distance", "distance from eager (relative)", ".2e"),
    ("q_mean", "mean Q", ",.2f"),
    ("alpha", "temperature", ".4f"),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1_000)
    parser.add_argument("--obs-dim", type=int, default=OBS_DIM)
    parser.add_argument("--action-dim", type=int, default=ACTION_DIM)
    parser.add_argument(
        "--activations", nargs="+", choices=("relu", "tanh", "elu"), default=["relu", "tanh"],
        help="the networks' activation: the family's relu, and a smooth one for comparison",
    )  # fmt: skip
    parser.add_argument(
        "--env", default=None,
        help="instead, a real run's batches: eager SAC trains on this Gymnasium env (only "
        "env.name set) and its copies update on what it samples",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.updates < 1 or args.obs_dim < 1 or args.action_dim < 1:
        raise SystemExit("--updates, --obs-dim and --action-dim must be positive integers")
    meta = setup(
        args,
        f"SAC updates, eager / rows reordered / compiled: obs {args.obs_dim}, "
        f"actions {args.action_dim}, {args.updates:,d} updates",
        method="one pass (--reps unused)",
    )
    if args.env is not None:
        rows = real_drift(args.env, args.updates)
    else:
        rows = [
            row
            for activation in dict.fromkeys(args.activations)
            for row in drift(args.updates, args.obs_dim, args.action_dim, activation)
        ]
    print_table(rows, COLUMNS)
    write_json(args.json, meta, {"rows": rows})


if __name__ == "__main__":
    main()
