"""Where can SAC's compiled runs part from eager ones? Two checks, from one training run.

Run from the repository root (needs `mujoco` for the MuJoCo envs):

    .venv/bin/python -m benchmarks.sac_paths                      # Hopper-v5, ~3 min
    .venv/bin/python -m benchmarks.sac_paths --env HumanoidStandup-v5 --iters 600

Compiled and eager SAC runs of one seed part within ~1,000 updates and return as two
seeds do, yet on some tasks one mode returns more over many seeds (benchmarks/README.md,
*suite*). These two checks bound where a difference beyond rounding could sit:

1. **The trainer besides the update.** A `Trainer` built with `runtime.compile` on (its
   collector then skips host checks, it checks for a compiler) but with SAC's eager update
   switched back in, against a plain eager `Trainer`, both for `--iters` iterations of
   what only `env.name` trains: bit-identical parameters and rollout, or not.
2. **The one function's arithmetic.** From the state the eager run reached, 1, 3 and
   `--updates` updates on the same batches along the eager path (autograd, torch's fused
   Adam) and along the compiled path's one function run uncompiled (`torch.func`
   gradients, `DeviceAdam`): the relative difference of the two changes, per part
   (actor, critics, target critics, temperature). Float rounding: ~1e-6.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch

from benchmarks.common import base_parser, setup, write_json
from benchmarks.env_defaults import experiment, one_function_eager_trainer
from rlcore.algos.sac import SAC
from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer


def sac_config(env_id: str, seed: int) -> ExperimentConfig:
    """What only `env.name` (and SAC) trains on `env_id`, at `seed`, without evaluations."""
    cfg = experiment(env_id, 100_000, "sac")
    trainer = dataclasses.replace(cfg.trainer, seed=seed, eval_every_iters=0)
    return dataclasses.replace(cfg, trainer=trainer)


def parameters(sac: SAC) -> dict[str, torch.Tensor]:
    """SAC's learned tensors by part, flat copies."""

    def flat(tensors: Any) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1) for t in tensors]).clone()

    return {
        "actor": flat(sac.actor.actor.parameters()),
        "critics": flat(sac.critic.parameters()),
        "target critics": flat(sac.critic_target.parameters()),
        "temperature": flat([sac.log_alpha]),
    }


def trained(cfg: ExperimentConfig, iters: int, compile_flag: bool) -> Trainer:
    """A trainer after `iters` iterations; with `compile_flag`, built with compiling on
    but SAC's eager update switched back in."""
    trainer = Trainer(cfg, compile_loss=compile_flag)
    trainer._evaluate = lambda: False  # type: ignore[method-assign]
    if compile_flag:
        algo = trainer.algo
        assert isinstance(algo, SAC)
        algo._compiled = algo._one_function = False
    trainer.run(max_iters=iters)
    return trainer


def trainer_besides_the_update(cfg: ExperimentConfig, iters: int) -> tuple[dict[str, Any], Trainer]:
    """Check 1; also returns the plain eager trainer (check 2 starts from its state)."""
    plain, flagged = trained(cfg, iters, False), trained(cfg, iters, True)
    assert isinstance(plain.algo, SAC) and isinstance(flagged.algo, SAC)
    ours, theirs = parameters(plain.algo), parameters(flagged.algo)
    same_rollout = all(
        torch.equal(plain.rollout[key], flagged.rollout[key])
        for key in plain.rollout.keys(True, True)
    )
    flagged.env.close()
    result = {
        "iterations": iters,
        "updates": plain.replay.updates if plain.replay is not None else 0,
        "parameters_bit_identical": all(torch.equal(ours[k], theirs[k]) for k in ours),
        "rollout_bit_identical": same_rollout,
    }
    return result, plain


def one_function_against_eager(
    cfg: ExperimentConfig, trainer: Trainer, updates: int
) -> dict[str, Any]:
    """Check 2, from `trainer`'s state: {updates: {part: relative difference}}."""
    algo = trainer.algo
    assert isinstance(algo, SAC) and trainer.replay is not None
    state, actor = copy.deepcopy(algo.state_dict()), copy.deepcopy(algo.actor.state_dict())
    draws = algo.generator.get_state()
    trainer.generator.manual_seed(cfg.trainer.seed + 100)
    sample = trainer.replay.mixer.sample
    batches = [sample(cfg.replay.batch_size).clone() for _ in range(updates)]

    def changes(path: str, count: int) -> dict[str, torch.Tensor]:
        other = one_function_eager_trainer(cfg) if path == "one function" else Trainer(cfg)
        sac = other.algo
        assert isinstance(sac, SAC)
        sac.actor.load_state_dict(actor)
        sac.load_state_dict(copy.deepcopy(state))
        sac.generator.set_state(draws)
        before = parameters(sac)
        for batch in batches[:count]:
            sac.update(batch)
        after = parameters(sac)
        other.env.close()
        return {part: after[part] - before[part] for part in before}

    result: dict[str, Any] = {"from_updates": trainer.replay.updates}
    for count in sorted({1, 3, updates}):
        eager, whole = changes("eager", count), changes("one function", count)
        result[str(count)] = {
            part: float((whole[part] - eager[part]).norm() / eager[part].norm()) for part in eager
        }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--iters", type=int, default=600, help="iterations of check 1")
    parser.add_argument("--updates", type=int, default=20, help="updates of check 2")
    args = parser.parse_args(argv)
    meta = setup(
        args, "SAC: compiled runs against eager ones, where they can differ",
        method="each check once (--reps unused)",
    )  # fmt: skip
    cfg = sac_config(args.env, args.seed)
    besides, plain = trainer_besides_the_update(cfg, args.iters)
    same = besides["parameters_bit_identical"], besides["rollout_bit_identical"]
    print(
        f"1. {args.env}, seed {args.seed}, {besides['iterations']} iterations "
        f"({besides['updates']} updates): a trainer built to compile, with the eager update, "
        f"against a plain eager one: parameters bit-identical {same[0]}, rollout {same[1]}"
    )
    arithmetic = one_function_against_eager(cfg, plain, args.updates)
    plain.env.close()
    print(
        f"2. from that state ({arithmetic['from_updates']} updates in), the one function "
        "uncompiled against the eager update on the same batches, relative difference of the "
        "changes:"
    )
    for count, parts in arithmetic.items():
        if count != "from_updates":
            shown = ", ".join(f"{part} {value:.1e}" for part, value in parts.items())
            print(f"   after {count} update(s): {shown}")
    write_json(args.json, meta, {"trainer": besides, "update": arithmetic})


if __name__ == "__main__":
    main()
