"""`python -m pipelines baseline`: back to the committed experiment after `dvc exp run`.

`dvc exp run` leaves the experiment's params, lock, metrics and reports in the workspace
(it is saved under `refs/exps` too, so nothing is lost by leaving it). This restores what
HEAD holds: the git-tracked experiment files (`params.yaml`, `dvc.lock`, `metrics/`,
`reports/`) as committed, untracked files under `metrics/` and `reports/` removed, and the
DVC-cached outputs (checkpoints, the video) checked out to the versions the committed
`dvc.lock` files name. An output whose committed version is not in the cache (a fresh clone
without a DVC remote, after the user's own `dvc repro`) is kept as it is, and named: checking
it out would only delete it. Code and everything else is left alone.
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
    if not pipelines:
        return done
    # An output whose committed version is not in the cache (a fresh clone without a DVC
    # remote) cannot be restored, and checking it out would delete the workspace's copy:
    # it is kept, and said so.
    outputs = _cached_outputs(root)
    missing = _uncached(root, outputs)
    dvc = [sys.executable, "-m", "dvc", "checkout", "--force", "--quiet"]
    if not missing:
        _run([*dvc, "--allow-missing", *pipelines], root)
        done.append(f"checked out DVC outputs to the versions in {', '.join(locks)}")
        return done
    available = [path for path, _ in outputs if path not in missing]
    if available:
        _run([*dvc, *available], root)
        done.append(f"checked out {', '.join(available)} to the versions in {', '.join(locks)}")
    done.append(
        f"kept {', '.join(missing)} unchanged: their committed versions are not in the DVC "
        "cache (`dvc pull` from a remote has them; `dvc repro` re-creates them)"
    )
    return done


def _cached_outputs(root: Path) -> list[tuple[str, str]]:
    """(path from `root`, md5) of each DVC-cached output with a version in the (restored)
    locks: DVC resolves each stage's working directory and which outputs it caches (the
    metrics and reports are git's)."""
    from dvc.repo import Repo

    outputs = []
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:
            for out in stage.outs:
                md5 = out.hash_info.value if out.hash_info else None
                if out.use_cache and md5:
                    path = Path(out.fs_path).resolve().relative_to(root.resolve()).as_posix()
                    outputs.append((path, md5))
    return outputs


def _uncached(root: Path, outputs: list[tuple[str, str]]) -> list[str]:
    """The outputs whose version (a directory: every file of it) is not in the local cache."""
    import json

    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        cache = repo.cache.local

        def present(md5: str) -> bool:
            if not cache.exists(md5):
                return False
            if not md5.endswith(".dir"):
                return True
            entries = json.loads(Path(cache.oid_to_path(md5)).read_text())
            return all(cache.exists(entry["md5"]) for entry in entries)

        return [path for path, md5 in outputs if not present(md5)]


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
