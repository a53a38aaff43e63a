"""The experiment flow on a throwaway DVC project whose four stages are one tiny script."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

if importlib.util.find_spec("prefect") is None:
    pytest.skip("prefect is not installed (pip install -e .)", allow_module_level=True)

import zc.lockfile
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, TaskRun
from prefect.exceptions import ObjectNotFound
from prefect.logging.handlers import APILogHandler

from pipelines.orchestration import flows
from pipelines.orchestration.portable_markdown import portable

T = TypeVar("T")
DVC = [sys.executable, "-m", "dvc"]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1"}
# Each stage prints, and `train` pauses between two lines so streaming can be told from batching.
STAGE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import yaml
    stage = sys.argv[1]
    lr = yaml.safe_load(Path("params.yaml").read_text())["algorithm"]["ppo"]["lr"]
    print(f"tiny {stage}: lr={lr}", flush=True)
    if lr >= 0.5:
        sys.exit(f"tiny {stage}: lr {lr} diverges")
    if stage == "train":
        time.sleep(0.5)
        print("tiny train: done", flush=True)
        Path("metrics").mkdir(exist_ok=True)
        Path("metrics/train.json").write_text(json.dumps({"train_loss": lr * 2}))
        Path("model.txt").write_text(str(lr))
    elif stage == "evaluate":
        Path("metrics/eval.json").write_text(json.dumps({"eval_return_mean": 500.0}))
    elif stage == "video":
        Path("video.txt").write_text("frames")
    else:
        Path("reports/run").mkdir(parents=True, exist_ok=True)
        Path("reports/run/report.md").write_text(f"# tiny\\n\\nlr {lr}\\n")
""")
DVC_YAML = """
stages:
  train:
    cmd: python stage.py train
    deps: [stage.py]
    params: [algorithm.ppo.lr]
    outs: [model.txt]
    metrics: [{metrics/train.json: {cache: false}}]
  evaluate:
    cmd: python stage.py evaluate
    deps: [stage.py, model.txt]
    metrics: [{metrics/eval.json: {cache: false}}]
  video:
    cmd: python stage.py video
    deps: [stage.py, model.txt]
    outs: [video.txt]
  report:
    cmd: python stage.py report
    deps: [stage.py, metrics/train.json, metrics/eval.json, video.txt]
    outs: [reports/run]
"""


def make_project(root: Path, lr: float = 0.1) -> Path:
    """A committed git + DVC project whose stages all run STAGE_SCRIPT."""
    params = {
        "name": "tiny",
        "algorithm": {"ppo": {"lr": lr}},
        "schedule": {"deployment": root.name, "flow": "experiment"},
    }
    (root / "stage.py").write_text(STAGE_SCRIPT)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    for args in (
        ["git", "init", "-q"],
        ["git", "config", "user.name", "test"],
        ["git", "config", "user.email", "test@example.com"],
        [*DVC, "init", "-q"],
        [*DVC, "config", "core.analytics", "false"],
        ["git", "add", "-A"],
        ["git", "-c", "commit.gpgsign=false", "commit", "-qm", "tiny project"],
    ):
        subprocess.run(args, cwd=root, env=ENV, check=True, capture_output=True)
    return root


def eventually(probe: Callable[[], T | None], timeout_s: float = 120) -> T:
    """Poll `probe` until it returns something truthy (the API records runs asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        assert time.monotonic() < deadline, f"gave up after {timeout_s} s"
        time.sleep(0.2)
    return value


def runs_of(project: Path) -> list[FlowRun]:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    return [run for run in runs if run.parameters.get("project_dir") == str(project)]


def task_runs(flow_run_id: Any) -> dict[str, TaskRun]:
    run_filter = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        return {run.name: run for run in client.read_task_runs(flow_run_filter=run_filter)}


def logs(flow_run_id: Any) -> list[Any]:
    APILogHandler().flush()
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        return client.read_logs(log_filter)


def artifact(key: str) -> Any:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        )
    return found[0] if found else None


def deployment_named(name: str) -> Any:
    try:
        with get_client(sync_client=True) as client:
            return client.read_deployment_by_name(name)
    except ObjectNotFound:
        return None


def completed_run(deployment_id: Any) -> FlowRun | None:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
    done = [r for r in runs if r.deployment_id == deployment_id and r.state_name == "Completed"]
    return done[0] if done else None


@pytest.fixture(scope="module")
def tiny_run(prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    project = make_project(tmp_path_factory.mktemp("tiny"))
    return project, flows.experiment_flow(str(project), return_state=True)


def test_flow_runs_each_stage_through_dvc_and_publishes_artifacts(tiny_run: tuple[Path, Any]):
    project, state = tiny_run
    result = state.result()
    assert result["metrics"] == {
        "metrics/eval.json": {"eval_return_mean": 500.0},
        "metrics/train.json": {"train_loss": 0.2},
    }
    report = (project / "reports/run/report.md").read_text()
    lock = (project / "dvc.lock").read_text()
    assert set(yaml.safe_load(lock)["stages"]) == set(flows.STAGES)  # DVC recorded every stage
    assert {t.name for t in task_runs(state.state_details.flow_run_id).values()} >= {*flows.STAGES}

    table = artifact("tiny-metrics")
    assert table.type == "table" and table.flow_run_id == state.state_details.flow_run_id
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {"file": "metrics/train.json", "name": "train_loss", "value": 0.2} in rows
    assert artifact("tiny-report").data == report

    again = flows.experiment_flow(str(project), return_state=True)
    messages = [log.message for log in logs(again.state_details.flow_run_id)]
    assert (project / "dvc.lock").read_text() == lock
    assert not any(m.startswith("Running stage") for m in messages)
    for stage in flows.STAGES:
        assert f"Stage '{stage}' didn't change, skipping" in messages


def test_stage_output_streams_into_the_run_log_line_by_line(tiny_run: tuple[Path, Any]):
    _, state = tiny_run
    records = {log.message: log for log in logs(state.state_details.flow_run_id)}
    first, last = records["tiny train: lr=0.1"], records["tiny train: done"]
    # the stage sleeps 0.5 s between the two lines: logged as they came, not when it ended
    assert last.timestamp - first.timestamp >= timedelta(seconds=0.4)
    assert records["Running stage 'report':"].task_run_id is not None


def test_a_failing_stage_fails_the_flow_after_one_attempt(
    prefect_api_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    project = make_project(tmp_path, lr=0.9)  # valid params that the tiny `train` rejects
    assert flows.flow_main(["--project-dir", str(project)]) == 1
    error = capsys.readouterr().err
    assert "error: train failed with exit code 255" in error and "lr 0.9 diverges" in error

    (run,) = runs_of(project)
    train = eventually(lambda: task_runs(run.id).get("train"))
    assert train.state.is_failed() and train.run_count == 1
    assert "evaluate" not in task_runs(run.id)


def test_dvc_lines_keep_their_level_except_the_expected_warnings():
    import logging

    from pipelines.orchestration.dvc_tasks import _level

    assert _level("ERROR: failed to reproduce 'train@0'") == logging.ERROR
    assert _level("WARNING: Your workspace has uncommitted changes") == logging.WARNING
    assert _level("WARNING: No file hash info found for 'x'. It won't be created.") == (
        logging.INFO
    )
    assert _level("Running stage 'train@0':") == logging.INFO


def test_only_io_errors_are_retried():
    assert flows.is_transient(flows.DvcLockError("lock held"))
    assert flows.is_transient(BlockingIOError(11, "Resource temporarily unavailable"))
    assert not flows.is_transient(flows.StageError("train failed with exit code 255"))
    assert not flows.is_transient(flows.RunOutputError("metrics/eval.json is missing"))
    assert not flows.is_transient(FileNotFoundError("no such project"))


def test_a_held_dvc_lock_is_retried_until_released(prefect_api_url: str, tmp_path: Path):
    project = make_project(tmp_path)
    (project / ".dvc/tmp").mkdir(exist_ok=True)
    lock = zc.lockfile.LockFile(str(project / ".dvc/tmp/lock"))  # what another `dvc` holds

    def release_once_awaiting_retry() -> None:
        try:
            eventually(
                lambda: any(
                    task.state_name == "AwaitingRetry"
                    for run in runs_of(project)
                    for task in task_runs(run.id).values()
                ),
                timeout_s=240,
            )
        finally:
            lock.close()

    releaser = threading.Thread(target=release_once_awaiting_retry)
    releaser.start()
    try:
        state = flows.experiment_flow(str(project), stages=["train"], return_state=True)
    finally:
        releaser.join()
    assert state.is_completed(), state.message
    train = task_runs(state.state_details.flow_run_id)["train"]
    assert train.run_count >= 2 and train.state.is_completed()
    messages = [log.message for log in logs(state.state_details.flow_run_id)]
    assert any("Unable to acquire lock" in m for m in messages)


def test_a_flow_publishes_the_metrics_of_its_own_stages_only(prefect_api_url: str, tmp_path: Path):
    project = make_project(tmp_path)
    # Left by an older experiment's report: not this run's, so never published under its name.
    (project / "metrics").mkdir(exist_ok=True)
    (project / "metrics" / "summary.json").write_text(json.dumps({"eval_return_mean": -1.0}))
    state = flows.experiment_flow(str(project), stages=["train"], return_state=True)
    assert state.result()["metrics"] == {"metrics/train.json": {"train_loss": 0.2}}
    with get_client(sync_client=True) as client:  # this run's table, not another test's
        (table,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["tiny-metrics"])),
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
            ),
        )
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {row["file"] for row in rows} == {"metrics/train.json"}


def test_a_variant_becomes_a_dvc_experiment_with_its_overrides(
    prefect_api_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    project = make_project(tmp_path)
    argv = ["--project-dir", str(project), "--variant", "lr-3e-4", "-S", "algorithm.ppo.lr=3e-4"]
    assert flows.flow_main(argv) == 0
    assert "train_loss=0.0006" in capsys.readouterr().out

    show = subprocess.run(
        [*DVC, "exp", "show", "--json"], cwd=project, env=ENV, check=True, capture_output=True
    )
    (baseline,) = [row for row in json.loads(show.stdout) if row["rev"] != "workspace"]
    (experiment,) = baseline["experiments"]
    assert experiment["name"] == "lr-3e-4"
    params = experiment["revs"][0]["data"]["params"]["params.yaml"]["data"]
    assert params["algorithm"]["ppo"]["lr"] == 3e-4
    # documented: like `dvc exp run`, the workspace is left holding the variant
    assert yaml.safe_load((project / "params.yaml").read_text())["algorithm"]["ppo"]["lr"] == 3e-4
    assert artifact("tiny-lr-3e-4-metrics") is not None

    # The compare flow: the baseline against the variant, published as a Markdown artifact.
    assert flows.flow_main(["--project-dir", str(project), "--compare"]) == 0
    assert "compared HEAD (" in capsys.readouterr().out
    page = (project / "reports" / "compare.md").read_text()
    assert "| lr-3e-4 |" in page and "algorithm.ppo.lr" in page
    # Prefect's UI cannot follow paths relative to the page: figures inlined, no local links.
    published = artifact("tiny-compare").data
    assert published == portable(page, project / "reports")
    assert published.count("](data:image/png;base64,") == page.count("![")
    assert "](compare/" not in published


def test_serve_registers_the_schedule_and_a_scheduled_run_completes(
    prefect_api_url: str, tmp_path: Path
):
    project = make_project(tmp_path)
    env = {**ENV, "PREFECT_API_URL": prefect_api_url, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    serve = "from pipelines.orchestration.serve import serve_main; raise SystemExit(serve_main())"
    argv = [sys.executable, "-c", serve, "--project-dir", str(project), "--interval-seconds", "2"]
    # Started as a shell starts a background job (`serve &`): with SIGINT ignored.
    ignore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731
    with (tmp_path / "serve.log").open("w") as log:
        server = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=ignore_sigint
        )
    stopped = False
    try:
        deployment = eventually(
            lambda: deployment_named(f"experiment/{project.name}"), timeout_s=240
        )
        assert deployment.parameters == {"project_dir": str(project)}
        (schedule,) = deployment.schedules
        assert schedule.schedule.interval == timedelta(seconds=2) and schedule.active
        # The test server runs no scheduler service; ask the API to materialise the runs
        # from the deployment's own schedule, as the scheduler does each loop.
        with get_client(sync_client=True) as client:
            client.request(
                "POST",
                "/deployments/{id}/schedule",
                path_params={"id": deployment.id},
                json={"max_runs": 1},
            ).raise_for_status()
        run = eventually(lambda: completed_run(deployment.id), timeout_s=300)
        assert run.auto_scheduled and (project / "reports/run/report.md").is_file()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
            stopped = True
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert "serving deployment" in (tmp_path / "serve.log").read_text()
    assert stopped, "serve ignored SIGINT"


# The tiny stage script, plus a `search` stage (the other stages never run in this test).
SEARCH_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    assert sys.argv[1] == "search"
    Path("metrics").mkdir(exist_ok=True)
    Path("metrics/search.json").write_text(json.dumps({"trials": 3, "best_value": 7.0}))
    Path("reports/search").mkdir(parents=True, exist_ok=True)
    Path("reports/search/summary.md").write_text("# Search: tiny\\n")
""")
SEARCH_DVC_YAML = """
stages:
  search:
    wdir: ..
    cmd: python stage.py search
    deps: [stage.py]
    metrics: [{metrics/search.json: {cache: false}}]
    outs: [{reports/search: {cache: false}}]
"""


def test_search_flow_runs_the_search_stage_and_publishes_its_summary(
    prefect_api_url: str, tmp_path: Path
):
    project = tmp_path / "tiny-search"
    project.mkdir()
    make_project(project)
    (project / "stage.py").write_text(SEARCH_SCRIPT)
    (project / "search").mkdir()
    (project / "search" / "dvc.yaml").write_text(SEARCH_DVC_YAML)
    state = flows.search_flow(str(project), return_state=True)
    result = state.result()
    assert result["metrics"]["metrics/search.json"] == {"trials": 3, "best_value": 7.0}
    assert artifact("search-search-summary").data == "# Search: tiny\n"
    assert not (project / "model.txt").exists()  # the experiment's stages did not run


def test_a_run_pushed_to_the_remote_is_evaluated_in_another_clone_without_training(
    prefect_api_url: str, tmp_path: Path
):
    """Machine A runs the flow, which pushes to the default remote (a local directory);
    machine B clones the repository, pulls, and runs evaluate and video without training."""
    (tmp_path / "a").mkdir()
    first = make_project(tmp_path / "a")
    store = tmp_path / "store"
    git = ["git", "-c", "commit.gpgsign=false"]
    for args in (
        [*DVC, "remote", "add", "-d", "shared", str(store)],
        ["git", "add", "-A"],
        [*git, "commit", "-qm", "a shared remote"],
    ):
        subprocess.run(args, cwd=first, env=ENV, check=True, capture_output=True)
    result = flows.experiment_flow(str(first), stages=["train"])
    assert result["pushed_to"] == "shared" and any(store.rglob("*"))
    for args in (["git", "add", "-A"], [*git, "commit", "-qm", "trained"]):
        subprocess.run(args, cwd=first, env=ENV, check=True, capture_output=True)

    second = tmp_path / "b"
    subprocess.run(["git", "clone", "-q", str(first), str(second)], env=ENV, check=True)
    assert not (second / "model.txt").exists()
    run = lambda *args: subprocess.run(  # noqa: E731
        [*DVC, *args], cwd=second, env=ENV, check=True, capture_output=True, text=True
    )
    run("pull", "train")
    assert (second / "model.txt").read_text() == "0.1"
    out = run("repro", "video").stdout + run("repro", "evaluate").stdout
    assert "Stage 'train' didn't change, skipping" in out
    assert "Running stage 'train'" not in out
    assert (second / "video.txt").read_text() == "frames"
    assert json.loads((second / "metrics/eval.json").read_text()) == {"eval_return_mean": 500.0}


def test_without_a_remote_nothing_is_pushed(tiny_run: tuple[Path, Any]):
    assert tiny_run[1].result()["pushed_to"] is None


def test_an_explicit_push_without_a_remote_is_one_line_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    project = make_project(tmp_path)
    assert flows.flow_main(["--project-dir", str(project), "--push"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {flows.NO_REMOTE}"] and "dvc remote add -d NAME URL" in err[0]
    assert not (project / "model.txt").exists()  # no stage ran
    with pytest.raises(ValueError, match="no default DVC remote"):
        flows.experiment_flow.fn(str(project), push=True)  # a deployment's parameters
    assert not (project / "model.txt").exists()


def test_a_configured_server_that_does_not_answer_is_one_line_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    import socket

    from prefect.settings import PREFECT_API_URL, temporary_settings

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/api"
    project = make_project(tmp_path)
    with temporary_settings({PREFECT_API_URL: url}):
        assert flows.flow_main(["--project-dir", str(project)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: the Prefect server at {url} does not")
    assert "prefect server start" in err[0]
    assert not (project / "model.txt").exists()  # no stage ran


def test_a_deployment_on_a_work_pool_runs_in_a_workers_own_clone(
    prefect_api_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """`deploy --pool` from clone A; a worker started in clone B runs the on-demand
    deployment there (B's stages, B's outputs), and the artifacts are published."""
    from prefect.client.schemas.actions import WorkPoolCreate

    from pipelines.orchestration.deploy import deploy_main

    (tmp_path / "a").mkdir()
    first = make_project(tmp_path / "a")
    pool = f"pool-{tmp_path.name}"
    assert deploy_main(["--pool", pool, "--project-dir", str(first)]) == 2
    assert f"work pool {pool!r} does not exist" in capsys.readouterr().err
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    assert deploy_main(["--pool", pool, "--project-dir", str(first)]) == 0
    assert f"deployed 'experiment/a-on-demand' on pool {pool!r}" in capsys.readouterr().out

    second = tmp_path / "b"
    subprocess.run(["git", "clone", "-q", str(first), str(second)], env=ENV, check=True)
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("experiment/a-on-demand")
        assert deployment.work_pool_name == pool and deployment.parameters == {}
        run = client.create_flow_run_from_deployment(deployment.id)
    worker = subprocess.run(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--run-once"],
        cwd=tmp_path,  # not a project: the flow must find B through the variable
        env={**ENV, "PREFECT_API_URL": prefect_api_url, flows.PROJECT_DIR_ENV: str(second)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    with get_client(sync_client=True) as client:
        finished = client.read_flow_run(run.id)
    assert finished.state_name == "Completed", worker.stdout[-3000:] + worker.stderr[-3000:]
    assert (second / "reports/run/report.md").is_file() and (second / "model.txt").is_file()
    assert not (first / "model.txt").exists()  # A only deployed
    with get_client(sync_client=True) as client:
        reports = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["tiny-report"]))
        )
    assert run.id in {report.flow_run_id for report in reports}
