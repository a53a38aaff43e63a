"""`python -m pipelines search`: the study of a params file, or one worker process of it."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.layout import Layout
from pipelines.search.space import checked_search, search_section
from pipelines.stages.run import guarded, set_render_env

if TYPE_CHECKING:
    from pipelines.params import Params


def _search_errors() -> tuple[type[Exception], ...]:
    from pipelines.files import OutputError
    from pipelines.search.errors import SearchError
    from rlcore.errors import CompileUnavailableError, ConfigError, MissingExtraError

    return (SearchError, CompileUnavailableError, ConfigError, MissingExtraError, OutputError)


def search_main(argv: list[str]) -> int:
    """`search`: the study (coordinator), or `--worker`: one extra process of it."""
    parser = argparse.ArgumentParser(prog="python -m pipelines search")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--workers", type=int, default=1, help="local worker processes")
    parser.add_argument(
        "--join", action="store_true", help="join a running study (keep its RUNNING trials)"
    )
    # A worker process of a search (its index: its sampler seed) and the search's pid.
    parser.add_argument("--worker", type=int, nargs="?", const=0, help=argparse.SUPPRESS)
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    def run(params: Params) -> None:
        from pipelines.search.stage import search
        from pipelines.search.worker import run_worker
        from pipelines.stages.lifeline import die_with_parent

        set_render_env()  # trials build envs (and its workers inherit the environment)

        study_name = search_section(params, args.params).study_name
        layout = Layout().for_search_params(args.params, study_name)
        # Ctrl-C (SIGINT) stops a search and the search stops its workers with it. A process
        # started with `&` from a script inherits SIGINT ignored (POSIX), and Python then
        # installs no handler: install it, so that `kill -INT` stops a background search as
        # Ctrl-C does, and a worker (in its own session, out of a terminal's reach) too.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if args.worker is not None:
            if args.parent_pid is not None:
                die_with_parent(args.parent_pid)
            try:
                run_worker(params, layout, worker=args.worker)
            except KeyboardInterrupt:  # its search says so, once for all workers
                raise SystemExit(130) from None
        else:
            search(params, layout, args.workers, args.join, params_path=args.params)

    return guarded(
        "search",
        args.params,
        run,
        _search_errors,
        "the study keeps every finished trial",
        check=checked_search,
    )
