"""`python -m pipelines baseline`: back to the committed experiment after `dvc exp run`.

`dvc exp run` leaves the experiment's params, lock, metrics and reports in the workspace
(it is saved under `refs/exps` too, so nothing is lost by leaving it). This restores what
HEAD holds: the git-tracked experiment files (`params.yaml`, `dvc.lock`, `metrics/`,
`reports/`) as committed, untracked files under `metrics/` and `reports/` removed, and the
DVC-cached outputs (checkpoints, the video) checked out to the versions the committed
`dvc.lock` files name (outputs missing from the cache, as in a fresh clone without a DVC
remote, are skipped). Code and everything else is left alone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

TRACKED = ("params.yaml", "dvc.lock", "metrics", "reports")


class BaselineError(RuntimeError):
    """The workspace cannot be restored (not a git repository, or git/DVC refused)."""


def _run(args: list[str], root: Path) -> str:
    done = subprocess.run(args, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise BaselineError(f"`{' '.join(args)}` failed: {message[-1] if message else ''}")
    return done.stdout


def restore_baseline(root: Path = Path(".")) -> list[str]:
    """Restore HEAD's experiment files and outputs; return what was done, line by line."""
    _run(["git", "rev-parse", "--verify", "HEAD"], root)
    committed = [p for p in TRACKED if _run(["git", "ls-tree", "HEAD", "--", p], root).strip()]
    done = []
    if committed:
        _run(["git", "restore", "--source=HEAD", "--staged", "--worktree", "--", *committed], root)
        done.append(f"restored {', '.join(committed)} as committed in HEAD")
    folders = [p for p in ("metrics", "reports") if (root / p).is_dir()]
    if folders:
        _run(["git", "clean", "-fdq", "--", *folders], root)
        done.append(f"removed untracked files under {', '.join(folders)}")
    # The pipelines that have run (a committed lock): a side pipeline never run (search,
    # collect) has no versions to restore, and naming it would fail the checkout.
    files = _run(["git", "ls-tree", "-r", "--name-only", "HEAD"], root).splitlines()
    locks = [f for f in files if f == "dvc.lock" or f.endswith("/dvc.lock")]
    pipelines = [str(Path(lock).with_name("dvc.yaml")) for lock in locks]
    if pipelines:
        checkout = ["checkout", "--force", "--quiet", "--allow-missing", *pipelines]
        _run([sys.executable, "-m", "dvc", *checkout], root)
        done.append(f"checked out DVC outputs to the versions in {', '.join(locks)}")
    return done


def baseline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines baseline", description=__doc__)
    parser.parse_args(argv)
    try:
        for line in restore_baseline():
            print(f"[baseline] {line}")
    except BaselineError as exc:
        print(f"error: baseline: {exc}", file=sys.stderr)
        return 1
    return 0
