"""One PPO minibatch step four ways: the prototype behind issue P19's whole-step compilation.

Run from the repository root:

    .venv/bin/python -m benchmarks.fused_step                      # CPU, one thread
    .venv/bin/python -m benchmarks.fused_step --device cuda --rows 4096 16384 65536

Variants, each from the same parameters on the same minibatch indices:

- `eager`: today's `PPO._step` (gather, advantage normalisation, loss, backward, clip, fused
  Adam, the finite check that reads the host);
- `loss`: the same with `runtime.compile`'s compiled loss (what ships today);
- `step`: the whole step as two compiled functions (gather + normalisation + loss, whose
  backward AOTAutograd compiles too; clipping + Adam with the learning rate as a device
  tensor), nothing read back to the host;
- `graph` (CUDA): `step` captured once as a CUDA graph and replayed; the minibatch indices
  are a static buffer and the rollout's storage is read in place, so a replay is the step.

Prints the median milliseconds per minibatch step and each variant's ratio to `eager`, and
checks that one step of every variant leaves the same parameters as `eager` (float
tolerance). The networks are the presets' (cartpole: 4 -> 64x64 relu -> 2 discrete;
halfcheetah: 17 -> 256x256 relu -> 6 continuous, normalised observations).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium.spaces as spaces
import torch

from benchmarks.common import base_parser, print_table, setup, write_json
from rlcore.algos.config import PPOConfig
from rlcore.algos.losses import approx_kl, clip_fraction, clipped_surrogate
from rlcore.algos.ppo import PPO, value_loss
from rlcore.config import PolicyConfig
from rlcore.policies import ActorCritic
from rlcore.rollout import ACTION, ADVANTAGE, OBS, SAMPLE_LOG_PROB, VALUE, VALUE_TARGET

TASKS: dict[str, tuple[int, spaces.Space, PolicyConfig]] = {
    "cartpole": (4, spaces.Discrete(2), PolicyConfig(hidden_sizes=(64, 64), activation="relu")),
    "halfcheetah": (
        17,
        spaces.Box(-1.0, 1.0, (6,)),
        PolicyConfig(hidden_sizes=(256, 256), activation="relu", normalize_obs=True),
    ),
}


def make_storage(
    obs_dim: int, space: spaces.Space, rows: int, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """A flat rollout's fields, filled with plausible values."""
    if isinstance(space, spaces.Discrete):
        action = torch.randint(0, int(space.n), (rows,), generator=gen)
    else:
        action = torch.rand(rows, space.shape[0], generator=gen) * 2 - 1
    fields = {
        OBS: torch.randn(rows, obs_dim, generator=gen),
        ACTION: action,
        SAMPLE_LOG_PROB: -torch.rand(rows, generator=gen) - 0.5,
        VALUE: torch.randn(rows, generator=gen),
        VALUE_TARGET: torch.randn(rows, generator=gen),
        ADVANTAGE: torch.randn(rows, generator=gen),
    }
    return {k: v.to(device) for k, v in fields.items()}


class WholeStep:
    """The step as compiled functions that never return to the host."""

    def __init__(
        self, policy: ActorCritic, cfg: PPOConfig, storage: dict[str, torch.Tensor], graph: bool
    ) -> None:
        self.policy, self.cfg, self.storage = policy, cfg, storage
        device = next(policy.parameters()).device
        self.params = list(policy.parameters())
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.lr = torch.tensor(cfg.lr, device=device)
        # The rate as a tensor, so a schedule changes data, not the compiled code: on CUDA the
        # capturable foreach Adam (graph-safe), on CPU the fused one (the only CPU Adam that
        # takes a tensor rate).
        on_cuda = device.type == "cuda"
        self.adam = torch.optim.Adam(
            self.params, lr=self.lr, eps=cfg.adam_eps, foreach=on_cuda or None,
            capturable=on_cuda, fused=not on_cuda or None,
        )  # fmt: skip
        self.loss_fn = torch.compile(self._loss, dynamic=False)
        self.apply_fn = torch.compile(self._apply, dynamic=False)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_idx: torch.Tensor | None = None
        self.static_stats: torch.Tensor | None = None
        self.capture = graph

    def _loss(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, cfg = self.storage, self.cfg
        adv = s[ADVANTAGE].index_select(0, idx)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        old_log_prob = s[SAMPLE_LOG_PROB].index_select(0, idx)
        out = self.policy.evaluate(s[OBS].index_select(0, idx), s[ACTION].index_select(0, idx))
        pg_loss, ratio = clipped_surrogate(out.log_prob, old_log_prob, adv, cfg.clip_eps)
        v_loss = value_loss(
            out.value, s[VALUE].index_select(0, idx), s[VALUE_TARGET].index_select(0, idx),
            cfg.clip_value_eps,
        )  # fmt: skip
        entropy = out.entropy.mean()
        loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
        with torch.no_grad():
            stats = torch.stack(
                [pg_loss, v_loss, entropy, approx_kl(ratio), clip_fraction(ratio, cfg.clip_eps)]
            )
        return loss, stats.detach()

    def _apply(self) -> None:
        grads = [p.grad for p in self.params]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        assert self.cfg.max_grad_norm is not None
        torch._foreach_mul_(grads, torch.clamp(self.cfg.max_grad_norm / (norm + 1e-6), max=1.0))
        self.adam.step()

    def eager_step(self, idx: torch.Tensor) -> torch.Tensor:
        for p in self.params:
            p.grad.zero_()  # type: ignore[union-attr]
        loss, stats = self.loss_fn(idx)
        loss.backward()
        self.apply_fn()
        return stats

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        if not self.capture:
            return self.eager_step(idx)
        if self.graph is None:
            self._capture(idx)
        assert self.static_idx is not None and self.graph is not None
        self.static_idx.copy_(idx)
        self.graph.replay()
        assert self.static_stats is not None
        return self.static_stats

    def _capture(self, idx: torch.Tensor) -> None:
        # Compile and warm up on a side stream (as torch.cuda.graphs asks), then capture.
        # Warm-up steps move the parameters: restore them so the first replay is step one.
        saved = [p.detach().clone() for p in self.params]
        self.static_idx = idx.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.eager_step(self.static_idx)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_stats = self.eager_step(self.static_idx)
        # Restored in place: the graph holds these very tensors (Adam's state included,
        # which its first steps created).
        with torch.no_grad():
            for p, s in zip(self.params, saved, strict=True):
                p.copy_(s)
            for state in self.adam.state.values():
                for value in state.values():
                    if torch.is_tensor(value):
                        value.zero_()


def build(
    task: str, variant: str, rows: int, minibatch: int, device: torch.device
) -> tuple[Callable[[torch.Tensor], Any], ActorCritic]:
    obs_dim, space, policy_cfg = TASKS[task]
    torch.manual_seed(0)
    policy = ActorCritic(obs_dim, space, policy_cfg).to(device)
    gen = torch.Generator().manual_seed(1)
    storage = make_storage(obs_dim, space, rows, device, gen)
    cfg = PPOConfig(lr=3e-4, microbatch_size=None)
    if variant in ("eager", "loss"):
        ppo = PPO(policy, cfg, 1000, torch.Generator(), compile_loss=variant == "loss")

        def step(idx: torch.Tensor) -> torch.Tensor:
            batch = {k: v.index_select(0, idx) for k, v in storage.items()}
            return ppo._step(ppo._normalize_advantage(batch), None)

        return step, policy
    return WholeStep(policy, cfg, storage, graph=variant == "graph"), policy


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(task: str, rows: int, minibatch: int, device: torch.device, reps: int, steps: int):
    variants = ["eager", "loss", "step"] + (["graph"] if device.type == "cuda" else [])
    gen = torch.Generator().manual_seed(2)
    indices = [torch.randperm(rows, generator=gen)[:minibatch].to(device) for _ in range(steps)]
    built = {v: build(task, v, rows, minibatch, device) for v in variants}
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
    for _ in range(reps):
        for name, (step, _) in built.items():
            sync(device)
            start = time.perf_counter()
            for idx in indices:
                step(idx)
            sync(device)
            samples[name].append((time.perf_counter() - start) / steps)
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


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--rows", nargs="+", type=int, default=[512, 2048], help="minibatch sizes")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed repetition")
    args = parser.parse_args()
    meta = setup(args, "One PPO minibatch step: eager, loss compiled, whole step compiled, graphed")
    device = torch.device(args.device)
    results = []
    for task in args.tasks:
        for minibatch in args.rows:
            results += measure(task, 4 * minibatch, minibatch, device, args.reps, args.steps)
    print_table(results, COLUMNS)
    write_json(args.json, meta | {"device": str(device)}, {"results": results})


if __name__ == "__main__":
    main()
