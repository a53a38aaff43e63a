"""A full disk is one line and loses nothing: every stage run again with a file size limit
(`RLIMIT_FSIZE`, what a full disk looks like to a writer, without mounting anything) fails
with one line, leaves the previous run's outputs as they were, and leaves no temporaries."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
TINY = {
    "name": "tiny",
    "seeds": [0],
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [64, 64]},  # a checkpoint far above the limits below
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 1024, "num_steps": 16, "eval_every_iters": 4,
                "eval_episodes": 2, "stop_at_eval_success": None},
    "evaluation": {"episodes": 2},
    "video": {"episodes": 2, "frame_size": 64, "max_steps": 20},
}  # fmt: skip
# Bytes a stage may write to one file: above what it writes before its outputs (DVCLive,
# TensorBoard), below the output it fails on (the checkpoint; eval.json; the MP4; the PNG).
LIMITS = {"train": 48_000, "evaluate": 64, "video": 300, "report": 1_000}
STOPS_AT = {
    "train": "outputs/seeds/0/checkpoints/final.pt",
    "evaluate": "metrics/seeds/0/eval.json",
    "video": "outputs/video/episodes.mp4",
    "report": "reports/run/curve.png",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("disk-full")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLCONFIGDIR": str(root / ".mpl"),  # matplotlib's cache, written by the first report
    }
    for stage in ("train", "evaluate", "video", "report"):
        done = run(root, env, stage)
        assert done.returncode == 0, done.stderr
    return root, env


def run(root, env, stage, limit=None):
    def limited():
        if limit is not None:  # Python ignores SIGXFSZ: a write past it fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "pipelines", stage], cwd=root, env=env, preexec_fn=limited,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def outputs(root: Path) -> dict[str, bytes]:
    """Every file the stages publish (not DVCLive's files of a run in progress, TensorBoard's
    events or the seed's lock, which are written during a run by design)."""
    kept = {}
    for folder in ("outputs", "metrics", "reports"):
        for path in (root / folder).rglob("*"):
            skipped = {"live.partial", "tensorboard"} & set(path.parts)
            if path.is_file() and not skipped and path.name != "train.lock":
                kept[str(path.relative_to(root))] = path.read_bytes()
    return kept


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp*") if ".mpl" not in p.parts]


@pytest.mark.parametrize("stage", ["train", "evaluate", "video", "report"])
def test_a_full_disk_is_one_line_and_the_previous_outputs_stay(project, stage):
    root, env = project
    before = outputs(root)
    params = root / "params.yaml"
    original = params.read_text()
    if stage == "train":  # another configuration: a new run, not one that was done already
        changed = {**TINY, "algorithm": {"ppo": {**TINY["algorithm"]["ppo"], "lr": 1e-4}}}
        params.write_text(yaml.safe_dump(changed))
    try:
        done = run(root, env, stage, LIMITS[stage])
    finally:
        params.write_text(original)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(errors) == 1, done.stderr
    expected = "disk full while writing"  # the output itself, not its temporary
    assert errors[0].startswith(f"error: {stage}: {expected} {STOPS_AT[stage]} ("), errors
    assert outputs(root) == before
    assert temporaries(root) == []
