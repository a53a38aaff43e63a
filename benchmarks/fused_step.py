"""One PPO minibatch step four ways: what `runtime.compile` does, against eager.

Run from the repository root:

    .venv/bin/python -m benchmarks.fused_step                      # CPU, one thread
    .venv/bin/python -m benchmarks.fused_step --device cuda --rows 4096 32768

Variants, each from the same parameters on the same minibatch indices of one rollout:

- `eager`: `PPO._step` (gather, advantage normalisation, loss, backward, clip, fused Adam,
  the finite check that reads the host);
- `loss`: the same with only the loss compiled (`PPO(compile_loss=True)`, what
  `runtime.compile` did before the whole step; still its path with several processes or
  explicit micro-batches);
- `step`: the whole step compiled (`rlcore.algos.whole_step`, what `runtime.compile` runs
  for PPO and GRPO), without CUDA graphs: gather + normalisation + loss + backward, clipping + Adam
  with the rate a device tensor; nothing read back. On CPU one compiled function (the
  gradients by `torch.func`); on CUDA the loss (its backward through AOTAutograd) and the
  update, two;
- `graph` (CUDA): `step` captured once as a CUDA graph and replayed, as `runtime.compile`
  runs it on CUDA; the minibatch indices are a static buffer and the rollout's storage is
  read in place, so a replay is the step;
- with `--bf16`, also `eager-bf16` and `step-bf16`: `eager` and `step` with
  `ppo.precision: bfloat16` (the hidden layers' matrix products in bf16; their parameters
  then differ from float32's by bf16's rounding, not float32's).

Prints the median milliseconds per minibatch step (CPU time on CPU, wall time on CUDA)
and each variant's ratio to `eager`, and checks that one step of every variant leaves the
same parameters as `eager` (float tolerance). The networks are the presets' (cartpole: 4
-> 64x64 relu -> 2 discrete; halfcheetah: 17 -> 256x256 relu -> 6 continuous, normalised
observations).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import gymnasium.spaces as spaces
import torch

from benchmarks.common import (
    base_parser,
    device_arg,
    matmul_ms_per_call,
    print_table,
    setup,
    write_json,
)
from rlcore.algos.config import PPOConfig
from rlcore.algos.ppo import PPO
from rlcore.config import PolicyConfig
from rlcore.observations import obs_spec
from rlcore.policies import ActorCritic
from rlcore.rollout import (
    ACTION,
    ADVANTAGE,
    OBS,
    SAMPLE_LOG_PROB,
    VALUE,
    VALUE_TARGET,
    RolloutSpec,
    make_rollout,
    transition_view,
)

TASKS: dict[str, tuple[int, spaces.Space, PolicyConfig]] = {
    "cartpole": (4, spaces.Discrete(2), PolicyConfig(hidden_sizes=(64, 64), activation="relu")),
    "halfcheetah": (
        17,
        spaces.Box(-1.0, 1.0, (6,)),
        PolicyConfig(hidden_sizes=(256, 256), activation="relu", normalize_obs=True),
    ),
}
NUM_ENVS = 64  # rows = NUM_ENVS x T transitions


def filled_rollout(obs_dim: int, space: spaces.Space, rows: int, device: torch.device):
    """A rollout of `rows` transitions whose fields hold plausible values."""
    discrete = isinstance(space, spaces.Discrete)
    spec = RolloutSpec(
        num_envs=NUM_ENVS, num_steps=rows // NUM_ENVS,
        obs_spec=obs_spec(spaces.Box(-10.0, 10.0, (obs_dim,))),
        action_shape=() if discrete else space.shape, action_dtype=torch.int64 if discrete
        else torch.float32, with_value=True, with_success=False, device=device,
    )  # fmt: skip
    rollout = make_rollout(spec)
    gen = torch.Generator().manual_seed(1)
    tv = transition_view(rollout)

    def fill(view: torch.Tensor, values: torch.Tensor) -> None:
        view.copy_(values.to(device))

    shape = tuple(tv.batch_size)
    for value in rollout[OBS].values():
        fill(value, torch.randn(value.shape, generator=gen))
    if discrete:
        fill(tv[ACTION], torch.randint(0, int(space.n), shape, generator=gen))
    else:
        fill(tv[ACTION], torch.rand(*shape, space.shape[0], generator=gen) * 2 - 1)
    fill(tv[SAMPLE_LOG_PROB], -torch.rand(shape, generator=gen) - 0.5)
    for key in (VALUE, VALUE_TARGET, ADVANTAGE):
        fill(tv[key], torch.randn(shape, generator=gen))
    return rollout


def build(
    task: str, variant: str, rows: int, device: torch.device
) -> tuple[Callable[[torch.Tensor], object], ActorCritic]:
    """The step of `variant` on a fresh policy (same parameters for every variant)."""
    obs_dim, space, policy_cfg = TASKS[task]
    torch.manual_seed(0)
    policy = ActorCritic(obs_spec(spaces.Box(-10.0, 10.0, (obs_dim,))), space, policy_cfg)
    policy = policy.to(device)
    rollout = filled_rollout(obs_dim, space, rows, device)
    precision = "bfloat16" if variant.endswith("-bf16") else "float32"
    variant = variant.removesuffix("-bf16")
    cfg = PPOConfig(lr=3e-4, microbatch_size=None, precision=precision)
    ppo = PPO(
        policy, cfg, 1000, torch.Generator(device=device), compile_loss=variant == "loss",
        whole_step=variant in ("step", "graph"),
    )  # fmt: skip
    if ppo.whole_step is not None:
        ppo.whole_step.graphs_wanted = variant == "graph"
        ppo.whole_step.begin(rollout)
        return ppo.whole_step.step, policy
    tv = transition_view(rollout)
    sources = {key: tv[key] for key in (ACTION, SAMPLE_LOG_PROB, VALUE, VALUE_TARGET, ADVANTAGE)}
    sources[OBS] = dict(tv[OBS].items())
    num_steps = rows // NUM_ENVS

    def step(idx: torch.Tensor) -> torch.Tensor:
        env, t = idx // num_steps, idx % num_steps
        batch = {
            key: {k: v[env, t] for k, v in src.items()} if isinstance(src, dict) else src[env, t]
            for key, src in sources.items()
        }
        return ppo._step(ppo._normalize_advantage(batch), None)

    return step, policy


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    task: str,
    rows: int,
    minibatch: int,
    device: torch.device,
    reps: int,
    steps: int,
    matmul: bool = False,
    bf16: bool = False,
):
    variants = ["eager", "loss", "step"] + (["graph"] if device.type == "cuda" else [])
    variants += ["eager-bf16", "step-bf16"] if bf16 else []
    gen = torch.Generator().manual_seed(2)
    indices = [torch.randperm(rows, generator=gen)[:minibatch].to(device) for _ in range(steps)]
    built = {v: build(task, v, rows, device) for v in variants}
    # One step of each from the same start: the parameters must agree with eager's.
    first_s: dict[str, float] = {}
    for name, (step, _) in built.items():
        start = time.perf_counter()
        step(indices[0])
        sync(device)
        first_s[name] = time.perf_counter() - start
    reference = torch.cat([p.detach().flatten() for p in built["eager"][1].parameters()])
    max_diff = {
        name: (torch.cat([p.detach().flatten() for p in policy.parameters()]) - reference)
        .abs()
        .max()
        .item()
        for name, (_, policy) in built.items()
    }
    # Which variants read the device back within a step (CUDA's sync debug mode).
    syncs: dict[str, str] = {}
    if device.type == "cuda":
        for name, (step, _) in built.items():
            torch.cuda.set_sync_debug_mode("error")
            try:
                step(indices[1])
                syncs[name] = "none"
            except RuntimeError as exc:
                syncs[name] = str(exc).splitlines()[0][:40]
            finally:
                torch.cuda.set_sync_debug_mode("default")
    samples: dict[str, list[float]] = {v: [] for v in variants}
    # CPU: this process's CPU time (other load on the machine barely moves it); CUDA: wall.
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    for _ in range(reps):
        for name, (step, _) in built.items():
            sync(device)
            start = clock()
            for idx in indices:
                step(idx)
            sync(device)
            samples[name].append((clock() - start) / steps)
    # What compiling cannot shorten: the step's time in matrix-product kernels (CPU).
    matmul_ms = {}
    if matmul and device.type == "cpu":
        for name, (step, _) in built.items():
            calls = iter(indices * 2)
            matmul_ms[name] = matmul_ms_per_call(lambda s=step, c=calls: s(next(c)), len(indices))
    eager_ms = statistics.median(samples["eager"]) * 1e3
    return [
        {
            "task": task,
            "rows": minibatch,
            "variant": name,
            "ms": statistics.median(samples[name]) * 1e3,
            "vs_eager": statistics.median(
                s / e for s, e in zip(samples[name], samples["eager"], strict=True)
            ),
            "first_s": first_s[name],
            "max_param_diff": max_diff[name],
            "syncs": syncs.get(name, "-"),
            "matmul_ms": matmul_ms.get(name, math.nan),
            "matmul_of_eager": matmul_ms.get(name, math.nan) / eager_ms,
        }
        for name in variants
    ]


COLUMNS = [
    ("task", "task", ""),
    ("rows", "minibatch", "d"),
    ("variant", "variant", ""),
    ("ms", "ms/step", ".3f"),
    ("vs_eager", "vs eager", ".2f"),
    ("first_s", "first step s", ".1f"),
    ("max_param_diff", "max |param - eager's|", ".1e"),
    ("syncs", "host syncs (CUDA)", ""),
]
MATMUL_COLUMNS = [("matmul_ms", "matmul ms", ".3f"), ("matmul_of_eager", "matmul / eager", ".2f")]


def main(argv: list[str] | None = None) -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--rows", nargs="+", type=int, default=[512, 2048], help="minibatch sizes")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed repetition")
    parser.add_argument(
        "--matmul", action="store_true",
        help="also profile each step: milliseconds in matrix products (CPU), the part "
        "compiling cannot shorten",
    )  # fmt: skip
    parser.add_argument(
        "--bf16", action="store_true",
        help="also time eager and the whole step with ppo.precision: bfloat16",
    )  # fmt: skip
    args = parser.parse_args(argv)
    device = device_arg(args.device)
    meta = setup(args, "One PPO minibatch step: eager, loss compiled, whole step compiled, graphed")
    results = []
    for task in args.tasks:
        for minibatch in args.rows:
            results += measure(
                task, 4 * minibatch, minibatch, device, args.reps, args.steps, args.matmul,
                args.bf16,
            )  # fmt: skip
    print_table(results, COLUMNS + (MATMUL_COLUMNS if args.matmul else []))
    write_json(args.json, meta | {"device": str(device)}, {"results": results})


if __name__ == "__main__":
    main()
