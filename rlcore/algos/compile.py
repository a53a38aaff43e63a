"""Optional `torch.compile` of the algorithms' loss functions.

A PPO minibatch step on the small MLPs of control tasks is a few hundred tiny tensor ops:
their dispatch, not their arithmetic, is the update's cost. Compiling the loss (forward and,
through AOTAutograd, backward) fuses them into a few generated kernels; see
benchmarks/README.md. The loss stays a pure tensor function so the compiled graph never breaks;
the finite check that needs the host stays outside it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

from rlcore.errors import CompileUnavailableError

if TYPE_CHECKING:
    from rlcore.algos.config import PPOConfig
    from rlcore.config import ExperimentConfig

F = TypeVar("F", bound=Callable)


def check_compile_available(device: torch.device) -> None:
    """Fail before training when the compiler backend for `device` is missing.

    Inductor builds C++ on CPU and Triton kernels on CUDA; without them the first update
    would fail deep inside torch after the rollout was collected.
    """
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            raise CompileUnavailableError(
                "runtime.compile on CUDA needs Triton (pip install triton), "
                "or set runtime.compile: false"
            )
        return
    compilers = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        raise CompileUnavailableError(
            "runtime.compile on CPU needs a C++ compiler (g++ or clang++ on PATH, or $CXX), "
            "or set runtime.compile: false"
        )


# Graphs torch keeps for one compiled function before it leaves that function eager, with
# only a logged warning (torch's default: 8). One process may train many architectures in
# turn (a search's trials over network sizes, a suite of tasks whose observation sizes
# differ), and each is a graph of its own: parameters' shapes never turn dynamic.
RECOMPILE_LIMIT = 64


def compiled(fn: F, **options: object) -> F:
    """`torch.compile(fn, **options)`, with room for the graphs of `RECOMPILE_LIMIT`
    architectures per function in this process (the limit is torch's, process-wide)."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, **options)  # type: ignore[return-value]


def maybe_compile(fn: F, enabled: bool) -> F:
    """`fn` compiled by `torch.compile` when `enabled`, else `fn` itself.

    Shapes start static and become dynamic after the first change (masked minibatches,
    a short last chunk), so a run compiles at most a couple of times.
    """
    return compiled(fn) if enabled else fn


# Why `auto` leaves SAC eager, as the train stage prints it.
SAC_STAYS_EAGER = (
    "SAC stays eager with auto: compiled runs returned less on HumanoidStandup-v5 "
    "(runtime.compile: true compiles it)"
)


def compile_pays(cfg: ExperimentConfig, world_size: int = 1) -> tuple[bool, str]:
    """Whether `runtime.compile: auto` compiles this run, and why, in a few words.

    Measured to pay back its compiling and to learn as eager does: PPO's whole minibatch
    step (one process, whole minibatches). SAC stays eager: compiling cuts a run's CPU to
    ~0.82x, but on ten fresh HumanoidStandup-v5 seeds (a test written down before it ran)
    compiled runs returned less than eager ones (benchmarks/README.md, *suite*, "SAC,
    100k"). GRPO (whole steps too, not measured to pay back) and SAC compile with
    `runtime.compile: true`. A run with a stop target may end within seconds (the builtin
    tasks' presets do), and a short run cannot pay back seconds of compiling, so both stay
    eager; so does a machine without the compiler backend.
    """
    from rlcore.algos import config
    from rlcore.algos.sac_config import SACConfig

    algo, device = cfg.algo, torch.device(cfg.env.device)
    if isinstance(algo, SACConfig):
        return False, SAC_STAYS_EAGER
    if not isinstance(algo, config.PPOConfig):
        return False, "only PPO's whole step is measured to pay back"
    pays, why = _ppo_compile_pays(cfg, algo, world_size)
    if not pays:
        return False, why
    if cfg.trainer.stop_at():
        return False, "a stop target: the run may end before compiling pays back"
    try:
        check_compile_available(device)
    except CompileUnavailableError as exc:
        return False, str(exc).split(",")[0]
    return True, why


def _ppo_compile_pays(cfg: ExperimentConfig, algo: PPOConfig, world_size: int) -> tuple[bool, str]:
    """PPO's half of `compile_pays`: whole minibatch steps, and enough of them planned."""
    from rlcore.algos.config import AUTO_COMPILE_MIN_STEPS

    if not algo.takes_whole_steps(world_size):
        return False, "several processes or explicit micro-batches: no whole step"
    steps = cfg.total_iters * algo.num_epochs * algo.num_minibatches
    if steps < AUTO_COMPILE_MIN_STEPS:
        return False, f"{steps:,d} minibatch steps planned, too few to pay back compiling"
    return True, f"{steps:,d} minibatch steps planned"
