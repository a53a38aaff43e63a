"""Runs to compare: the workspace, git revisions and DVC experiments, read without checkouts.

A run is one experiment (its `params.yaml` and the results of each of its `seeds`) as it
stands in the workspace or at a commit. DVC experiments are commits too (under
`refs/exps/`); DVC resolves their names, and every file is then read straight from git
(`git cat-file --batch`, one process for all of them), so comparing never touches the
workspace. Nothing here raises on a bad run: what is missing or malformed is recorded in
the run's `problems` and shown on the page.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.bounded import BoundedInputError, load_yaml
from pipelines.compare.aggregate import Reader, SeedRun, load_seeds, workspace_reader
from pipelines.layout import Layout

WORKSPACE = "workspace"
PARAMS_FILE = "params.yaml"
RELATIVE = Layout()  # paths as they appear inside any revision


class RunSelectionError(ValueError):
    """A requested run does not exist (or the project is not a git/DVC repository)."""


@dataclass(frozen=True)
class RunSource:
    """Where a run's files come from: the workspace (`rev` None) or a commit."""

    label: str
    rev: str | None
    kind: str  # "workspace", "experiment" or "commit"


@dataclass
class Run:
    """One experiment at one revision, as read for the comparison."""

    source: RunSource
    params: dict[str, Any] | None = None
    name: str | None = None
    seeds: list[SeedRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    video: Path | None = None  # the MP4 on disk: workspace output or DVC cache file
    search_summary: str | None = None
    fingerprint: str = ""

    @property
    def label(self) -> str:
        return self.source.label


class GitFiles:
    """Reads `rev:path` blobs through one long-lived `git cat-file --batch` process."""

    def __init__(self, root: Path) -> None:
        self._process = subprocess.Popen(
            ["git", "cat-file", "--batch"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def read_bytes(self, rev: str, path: str) -> bytes | None:
        """The file's bytes at `rev`, or None when it does not exist there (or is a folder)."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{rev}:{path}\n".encode())
        stdin.flush()
        header = stdout.readline().decode().split()
        if len(header) != 3:  # "<name> missing" or "<name> ambiguous"
            return None
        size = int(header[2])
        data = stdout.read(size)
        stdout.read(1)  # the newline after every object
        return data if header[1] == "blob" else None

    def reader(self, rev: str) -> Reader:
        def read(path: str) -> str | None:
            data = self.read_bytes(rev, path)
            if data is None:
                return None
            return data.decode("utf-8", errors="replace")

        return read

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)

    def __enter__(self) -> GitFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _git(root: Path, *args: str) -> str | None:
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def experiments(root: Path) -> dict[str, list[tuple[str, str]]]:
    """DVC experiments by baseline commit: {baseline sha: [(name, sha), ...]} (none outside
    a DVC project: plain git revisions still compare)."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            found = repo.experiments.ls(all_commits=True)
    except NotDvcRepoError:
        return {}
    return {base: [(name, sha) for name, sha in exps if sha] for base, exps in found.items()}


def select_sources(root: Path, requested: list[str]) -> list[RunSource]:
    """What to compare: the requested names/revisions in order, or by default the HEAD
    commit, every DVC experiment based on it, and the workspace."""
    head = _git(root, "rev-parse", "--verify", "HEAD^{commit}")
    if head is None:
        raise RunSelectionError(f"{root.resolve()} is not a git repository with a commit")
    exps = experiments(root)
    if not requested:
        own = [RunSource(name, sha, "experiment") for name, sha in exps.get(head, [])]
        return [
            RunSource(f"HEAD ({head[:7]})", head, "commit"),
            *own,
            RunSource(WORKSPACE, None, WORKSPACE),
        ]
    by_name = {name: sha for runs in exps.values() for name, sha in runs}
    sources = []
    for item in requested:
        if item == WORKSPACE:
            sources.append(RunSource(WORKSPACE, None, WORKSPACE))
        elif item in by_name:
            sources.append(RunSource(item, by_name[item], "experiment"))
        elif (
            sha := _git(root, "rev-parse", "--verify", "--quiet", f"{item}^{{commit}}")
        ) is not None:
            sources.append(RunSource(item, sha, "commit"))
        else:
            raise RunSelectionError(
                f"{item!r} is neither a DVC experiment (`dvc exp list --all-commits`), a git "
                f"revision, nor `{WORKSPACE}`"
            )
    return sources


def _video_in_cache(root: Path, lock_text: str | None) -> Path | None:
    """The video's file in the local DVC cache, from the revision's dvc.lock."""
    try:
        stages = (load_yaml(lock_text or "") or {}).get("stages", {})
    except (yaml.YAMLError, BoundedInputError, AttributeError):
        return None
    video = RELATIVE.video.as_posix()
    for stage in stages.values() if isinstance(stages, dict) else []:
        outs = stage.get("outs", []) if isinstance(stage, dict) else []
        for out in outs if isinstance(outs, list) else []:
            if isinstance(out, dict) and out.get("path") == video and "md5" in out:
                md5 = str(out["md5"])
                path = root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
                return path if path.is_file() else None
    return None


def load_run(source: RunSource, read: Reader, video: Path | None) -> Run:
    """Read one run through `read`; every problem is recorded, none is raised."""
    run = Run(source, video=video)
    text = read(PARAMS_FILE)
    digest = hashlib.sha256()
    if text is None:
        run.problems.append(f"{PARAMS_FILE} is missing")
        return run
    digest.update(text.encode())
    try:
        data = load_yaml(text)  # a revision's params.yaml: no aliases, bounded
    except yaml.YAMLError as exc:
        run.problems.append(f"{PARAMS_FILE}: malformed YAML ({exc.__class__.__name__})")
        return run
    except BoundedInputError as exc:
        run.problems.append(f"{PARAMS_FILE}: {exc}")
        return run
    if not isinstance(data, dict):
        run.problems.append(f"{PARAMS_FILE}: not a mapping")
        return run
    run.params, run.name = data, str(data.get("name", "experiment"))
    seeds = data.get("seeds", [0])
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        run.problems.append(f"{PARAMS_FILE}: `seeds` must be a list of integers, got {seeds!r}")
        return run

    def recorded(path: str) -> str | None:
        content = read(path)
        digest.update(f"\0{path}\0{content}".encode())
        return content

    run.seeds = load_seeds(recorded, RELATIVE, seeds)
    # The study that chose its settings: the one named like the experiment (run from its
    # own params file, `reports/search-<name>/`), else the one its `search.study_name` names
    # (an experiment confirming a trial carries its study's section), else params.yaml's own.
    studies = [run.name]
    search = data.get("search")
    if isinstance(search, dict) and search.get("study_name"):
        studies.append(str(search["study_name"]))
    summaries = (read(_summary(RELATIVE.for_study(study))) for study in studies)
    run.search_summary = next((s for s in summaries if s), None) or read(_summary(RELATIVE))
    run.fingerprint = digest.hexdigest()
    return run


def _summary(layout: Layout) -> str:
    return (layout.search_reports / "summary.md").as_posix()


def load_runs(root: Path, sources: list[RunSource], drop_same_workspace: bool) -> list[Run]:
    """Every source's run. With `drop_same_workspace`, the workspace is left out when its
    files equal another listed run's (after `dvc exp run` it holds that experiment)."""
    runs = []
    with GitFiles(root) as git:
        for source in sources:
            if source.rev is None:
                read = workspace_reader(root)
                video: Path | None = root / RELATIVE.video
            else:
                read = git.reader(source.rev)
                video = _video_in_cache(root, read("dvc.lock"))
            runs.append(load_run(source, read, video if video and video.is_file() else None))
    if not drop_same_workspace:
        return runs
    committed = {r.fingerprint for r in runs if r.source.rev is not None and r.fingerprint}
    return [r for r in runs if r.source.rev is not None or r.fingerprint not in committed]
