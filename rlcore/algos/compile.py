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
    from rlcore.algos.sac_config import SACConfig
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


def compile_pays(cfg: ExperimentConfig, world_size: int = 1) -> tuple[bool, str]:
    """Whether `runtime.compile: auto` compiles this run, and why, in a few words.

    Measured to pay back its compiling: PPO's whole minibatch step (one process, whole
    minibatches), and SAC's update on CPU in float32, where it is one compiled function
    (GRPO's loss, SAC's bf16 or CUDA update compile with `runtime.compile: true`). A run
    with a stop target may end within seconds (the builtin tasks' presets do), and a short
    run cannot pay back seconds of compiling, so both stay eager; so does a machine without
    the compiler backend.
    """
    from rlcore.algos import config
    from rlcore.algos.sac_config import SACConfig

    algo, device = cfg.algo, torch.device(cfg.env.device)
    if isinstance(algo, config.PPOConfig):
        pays, why = _ppo_compile_pays(cfg, algo, world_size)
    elif isinstance(algo, SACConfig):
        pays, why = _sac_compile_pays(cfg, algo, device)
    else:
        return False, "only PPO's whole step and SAC's CPU update are measured to pay back"
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


def _sac_compile_pays(
    cfg: ExperimentConfig, algo: SACConfig, device: torch.device
) -> tuple[bool, str]:
    """SAC's half of `compile_pays`: CPU, float32 and enough gradient steps planned."""
    from rlcore.algos.config import AUTO_COMPILE_MIN_SAC_UPDATES
    from rlcore.precision import trains_bf16

    if device.type != "cpu":
        return False, "SAC's update compiles with auto on CPU only (on CUDA it saves little)"
    if trains_bf16(algo.precision, device):
        return False, "SAC's update in bf16: compiled only in float32"
    learning_steps = max(cfg.trainer.total_env_steps - cfg.replay.warmup_steps, 0)
    updates = int(learning_steps * cfg.replay.updates_per_step)
    if updates < AUTO_COMPILE_MIN_SAC_UPDATES:
        return False, f"{updates:,d} SAC updates planned, too few to pay back compiling"
    return True, f"{updates:,d} SAC updates planned"
