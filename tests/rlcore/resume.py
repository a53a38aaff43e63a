"""One run straight through and one interrupted and resumed from its checkpoint: what every
exact-resume test compares."""

from pathlib import Path
from typing import Any

from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer


def straight_and_resumed(
    cfg: ExperimentConfig, checkpoint: Path, stop_after_iters: int, **trainer: Any
) -> tuple[Trainer, Trainer]:
    """Train `cfg` to the end, and again stopping after `stop_after_iters` iterations,
    saving, and finishing in a new Trainer loaded from that checkpoint (each Trainer built
    with the keyword arguments `trainer`: `compile_loss`, `sync_every`)."""
    straight = Trainer(cfg, **trainer)
    straight.run()
    first = Trainer(cfg, **trainer)
    first.run(max_iters=stop_after_iters, checkpoint_path=checkpoint)
    resumed = Trainer(cfg, **trainer)
    resumed.load(checkpoint)
    resumed.run()
    return straight, resumed
