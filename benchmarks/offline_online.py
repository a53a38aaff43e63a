"""Offline -> online: SAC on PushCube from a PPO policy's dataset vs SAC from scratch.

Run from the repository root:

    .venv/bin/python -m benchmarks.offline_online                 # seeds 0 1 2
    .venv/bin/python -m benchmarks.offline_online --seeds 0 --dataset-steps 20000

Per seed, in one invocation:
  1. PPO (`PRESETS["push_cube"]`) trains until its evaluation success rate is >= 0.9;
  2. its policy (sampled actions) records `--dataset-steps` env steps into a dataset
     (`rlcore.recording`, saved and loaded through `rlcore.datasets` like the collect stage);
  3. SAC from scratch (`SAC_PRESETS["push_cube"]`) and SAC with the dataset mixed into every
     batch (`replay.offline`, `--fraction` of each batch, no random warm-up) train until
     their evaluation success rate is >= 0.9 or the preset's budget ends.
The figure is the env steps SAC needs to reach 0.9 with the dataset over the env steps it
needs from scratch (target <= 0.5); the dataset's own env steps are reported beside it.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.config import ExperimentConfig, OfflineConfig
from rlcore.datasets import save_dataset
from rlcore.envs import make_env
from rlcore.presets import PRESETS, SAC_PRESETS
from rlcore.recording import record_transitions
from rlcore.trainer import Trainer

TARGET = 0.9


def seeded(cfg: ExperimentConfig, seed: int, **trainer: Any) -> ExperimentConfig:
    return dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, seed=seed, **trainer))


def train(impl: str, cfg: ExperimentConfig) -> tuple[dict[str, Any], Trainer]:
    start = time.perf_counter()
    trainer = Trainer(cfg)
    result = trainer.run()
    success = result.eval_metrics.get("eval/success_rate", float("nan"))
    row = {
        "impl": impl,
        "seed": cfg.trainer.seed,
        "env_steps": result.env_steps,
        "success": success,
        "reached": success >= TARGET,
        "wall_s": time.perf_counter() - start,
    }
    print_table([row], COLUMNS)
    return row, trainer


COLUMNS = [
    ("impl", "impl", ""),
    ("seed", "seed", ""),
    ("env_steps", "env steps", ",d"),
    ("success", "eval success", ".3f"),
    ("reached", ">= 0.9", ""),
    ("wall_s", "wall s", ".1f"),
]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--dataset-steps", type=int, default=50_000)
    parser.add_argument("--fraction", type=float, default=0.5)
    args = parser.parse_args(argv)
    meta = setup(
        args,
        "offline -> online SAC on PushCube",
        method=f"one run per variant and seed (seeds {args.seeds}); medians over seeds",
    )
    rows: list[dict[str, Any]] = []
    sac = seeded(SAC_PRESETS["push_cube"], 0)
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            ppo_row, ppo = train("ppo (data source)", seeded(PRESETS["push_cube"], seed))
            env = make_env(ppo.cfg.env)
            buffer, episodes = record_transitions(env, ppo.policy, args.dataset_steps, seed)
            path = Path(scratch) / f"push_cube_{seed}"
            save_dataset(path, buffer, source={"policy": "ppo", "seed": seed})
            data_success = episodes.successes.double().mean().item()
            print(f"dataset: {len(buffer):,d} transitions, episode success {data_success:.3f}")
            scratch_row, _ = train("sac from scratch", seeded(sac, seed))
            offline = dataclasses.replace(
                sac.replay, offline=OfflineConfig(str(path), args.fraction), warmup_steps=0
            )
            mixed_row, _ = train(
                f"sac + dataset ({args.fraction:g})",
                dataclasses.replace(seeded(sac, seed), replay=offline),
            )
            mixed_row["dataset_success"] = data_success
            rows += [ppo_row, scratch_row, mixed_row]
    print()
    print_table(rows, COLUMNS)
    scratch_steps = [r["env_steps"] for r in rows if r["impl"] == "sac from scratch"]
    mixed_steps = [r["env_steps"] for r in rows if r["impl"].startswith("sac + dataset")]
    ratio = statistics.median(mixed_steps) / statistics.median(scratch_steps)
    print(
        f"env steps to success {TARGET} (medians): with the dataset "
        f"{statistics.median(mixed_steps):,.0f}, from scratch "
        f"{statistics.median(scratch_steps):,.0f}; ratio {ratio:.3f} (target <= 0.5; "
        f"the dataset adds {args.dataset_steps:,d} env steps of the PPO policy)"
    )
    write_json(args.json, meta, {"rows": rows, "ratio": ratio})


if __name__ == "__main__":
    main()
