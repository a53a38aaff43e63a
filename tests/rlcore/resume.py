"""One run straight through and one interrupted and resumed from its checkpoint: what every
exact-resume test compares."""

from pathlib import Path

from rlcore.config import ExperimentConfig
from rlcore.trainer import Trainer


def straight_and_resumed(
    cfg: ExperimentConfig, checkpoint: Path, stop_after_iters: int
) -> tuple[Trainer, Trainer]:
    """Train `cfg` to the end, and again stopping after `stop_after_iters` iterations,
    saving, and finishing in a new Trainer loaded from that checkpoint."""
    straight = Trainer(cfg)
    straight.run()
    first = Trainer(cfg)
    first.run(max_iters=stop_after_iters, checkpoint_path=checkpoint)
    resumed = Trainer(cfg)
    resumed.load(checkpoint)
    resumed.run()
    return straight, resumed
