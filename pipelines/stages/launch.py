"""Start a stage as K processes on this machine with torch's own launcher.

The same machinery `torchrun --standalone --nproc_per_node=K` uses (an elastic agent with a
c10d rendezvous on a free local port); nothing here schedules or talks to the workers.
Several nodes are launched with `torchrun` directly (see docs/guide.md).
"""

from __future__ import annotations

import sys
import uuid


class LaunchError(RuntimeError):
    """One or more of the launched processes failed (their own messages are above)."""


def launch_local(processes: int, argv: list[str]) -> None:
    """Run `python <argv>` as `processes` ranks of one torch.distributed job; wait for all.

    Raises `LaunchError` naming the failed ranks and exit codes when any rank fails; the
    others are then stopped by the agent.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=processes,
        run_id=f"rlplatform-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.5,
    )
    try:
        elastic_launch(config, sys.executable)(*argv)
    except SignalException:  # the agent has stopped the ranks (they saved what they could)
        raise KeyboardInterrupt from None
    except ChildFailedError as exc:
        failed = ", ".join(
            f"rank {rank} (exit code {failure.exitcode})"
            for rank, failure in sorted(exc.failures.items())
        )
        count = len(exc.failures)
        raise LaunchError(f"{count} of {processes} processes failed: {failed}") from None
