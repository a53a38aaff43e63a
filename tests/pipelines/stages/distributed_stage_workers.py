"""The train stage inside each rank of tests/pipelines/stages/test_distributed_stage.py's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.train import train
from rlcore.distributed import Distributed
from rlcore.trainer import Trainer


def stage_resume_worker(dist: Distributed, tmp: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A straight run, and one interrupted in iteration 3 then resumed by the next run."""
    params = parse_params(config)
    straight = train(params, Layout(tmp / "straight"))
    layout = Layout(tmp / "interrupted")
    real_iteration = Trainer._train_iteration

    def crash_in_iteration_3(self: Trainer) -> None:
        if self.iteration == 2:
            raise KeyboardInterrupt
        real_iteration(self)

    Trainer._train_iteration = crash_in_iteration_3  # type: ignore[method-assign]
    try:
        train(params, layout)
    except KeyboardInterrupt:
        pass
    finally:
        Trainer._train_iteration = real_iteration  # type: ignore[method-assign]
    saved = layout.resume_checkpoint.exists()
    resumed = train(params, layout)
    return {"straight": straight, "resumed": resumed, "saved_progress": saved}
