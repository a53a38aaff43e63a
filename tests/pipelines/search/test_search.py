import contextlib
import csv
import itertools
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

import pipelines.search.objective as objective_module
import pipelines.search.trial_checkpoints as checkpoint_module
from pipelines.compare.aggregate import machine_line
from pipelines.layout import Layout
from pipelines.params import ParamsError, parse_params
from pipelines.search.errors import SearchError
from pipelines.search.recovery import fail_stale_trials, queue_again, requeue_stopped
from pipelines.search.space import checked_search, search_section
from pipelines.search.stage import search
from pipelines.search.storage import journal_path, make_storage
from pipelines.search.study import open_study, study_in, worker_seed
from pipelines.search.trial_checkpoints import drop_stale_checkpoints, trial_checkpoints
from pipelines.search.worker import run_worker
from pipelines.stages.train import run_training
from rlcore.errors import NonFiniteError
from rlcore.runtime import provenance

TINY = {
    "name": "tiny-search",
    "preset": "none",  # the library's defaults: no stop target cutting a slow trial short
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"num_epochs": 2, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 8 * 16 * 4, "num_steps": 16, "eval_episodes": 2},
    "search": {
        "study_name": "tiny",
        "space": {
            "algorithm.ppo.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "policy.hidden_sizes": {"type": "categorical", "choices": [[8], [16, 16]]},
        },
        "overrides": {"trainer.eval_every_iters": 1},
        "pruner": "median",
        "startup_trials": 2,
        "warmup_evals": 0,
        "n_trials": 5,
    },
}


def with_search(**changes):
    return {**TINY, "search": {**TINY["search"], **changes}}


def read_trials(layout):
    with (layout.search_reports / "trials.csv").open() as f:
        return list(csv.DictReader(f))


def ctrl_c(trainer, *args, **kwargs):
    """A training function whose trial a Ctrl-C stops at once."""
    raise KeyboardInterrupt


def test_tiny_study_end_to_end(tmp_path, capsys):
    params, layout = parse_params(TINY), Layout(tmp_path)
    # Force trial 3 to report a hopeless first evaluation: the median pruner must stop it.
    calls = itertools.count()

    def forced(trainer, *args, **kwargs):
        if next(calls) == 3:
            trainer.sink(0, {"eval/episode_return": -1e9})
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=forced)

    assert summary["trials"] == 5 and summary["pruned"] >= 1
    # Every evaluation is a line: a long trial shows how it goes before it ends.
    lines = capsys.readouterr().out.splitlines()
    assert "[search] trial 3: return -1e+09 at 0 env steps" in lines
    reported = open_study(params, layout).trials[0].intermediate_values
    assert sum(line.startswith("[search] trial 0: return ") for line in lines) == len(reported)
    assert summary["complete"] + summary["pruned"] == 5
    rows = read_trials(layout)
    assert [r["state"] for r in rows][3] == "PRUNED"
    assert {r["number"] for r in rows} == {"0", "1", "2", "3", "4"}
    here = machine_line(provenance("cpu"))  # where each trial trained, in its row
    assert {r["machine"] for r in rows} == {here} and "torch kernels" in here
    for name in ("summary.md", "optimization_history.png", "intermediate_values.png"):
        assert (layout.search_reports / name).stat().st_size > 0
    assert (layout.search_html / "optimization_history.html").read_text().count("plotly") > 10

    # best_params.yaml merges into params.yaml and passes the same validation.
    best = yaml.safe_load((layout.search_reports / "best_params.yaml").read_text())
    merged = {**TINY, "policy": {**TINY["policy"], **best["policy"]}}
    merged["algorithm"] = {"ppo": {**TINY["algorithm"]["ppo"], **best["algorithm"]["ppo"]}}
    experiment = parse_params(merged).experiment()
    assert experiment.algo.lr == pytest.approx(best["algorithm"]["ppo"]["lr"])
    assert summary["best_value"] == max(float(r["value"]) for r in rows if r["state"] == "COMPLETE")

    # Resuming a finished study runs no new trial.
    again = search(params, layout)
    assert again["trials"] == 5


def test_a_study_on_several_kinds_of_machine_says_so(tmp_path, monkeypatch):
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    machines = iter(["AMD EPYC (torch kernels AVX2)", "Intel Xeon (torch kernels AVX512)"])
    monkeypatch.setattr(objective_module, "machine_line", lambda provenance: next(machines))
    search(params, layout)
    assert [r["machine"] for r in read_trials(layout)] == [
        "AMD EPYC (torch kernels AVX2)", "Intel Xeon (torch kernels AVX512)"
    ]  # fmt: skip
    summary = (layout.search_reports / "summary.md").read_text()
    assert "trials ran on 2 kinds of machine (`trials.csv`, column `machine`)" in summary


def test_non_finite_trial_fails_and_the_study_goes_on(tmp_path):
    params, layout = parse_params(with_search(n_trials=3, pruner="none")), Layout(tmp_path)
    calls = itertools.count()

    def poisoned(trainer, *args, **kwargs):
        if next(calls) == 1:
            raise NonFiniteError("the env produced a non-finite obs")
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=poisoned)
    assert summary["fail"] == 1 and summary["complete"] == 2


def test_enqueued_trials_run_first_once_within_n_trials(tmp_path):
    published = {"algorithm": {"ppo": {"lr": 3e-4}}, "policy.hidden_sizes": [16, 16]}
    data = with_search(n_trials=3, enqueue=[published, {"algorithm.ppo.lr": 5e-3}])
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["trials"] == 3
    trials = open_study(params, layout).get_trials()
    assert trials[0].params == {"algorithm.ppo.lr": 3e-4, "policy.hidden_sizes": "[16, 16]"}
    assert trials[1].params["algorithm.ppo.lr"] == 5e-3  # its hidden sizes sampled
    assert "enqueued" not in trials[2].user_attrs

    more = parse_params(with_search(n_trials=4, enqueue=data["search"]["enqueue"]))
    assert search(more, layout)["trials"] == 4  # resumed: nothing queued twice
    assert [t.state for t in open_study(more, layout).get_trials()].count(TrialState.WAITING) == 0
    assert sum("enqueued" in t.user_attrs for t in open_study(more, layout).get_trials()) == 2


def test_objective_evals_averages_each_trials_last_evaluations(tmp_path):
    # 4 iterations, an evaluation after each: the value is the mean of the last 3 of 4.
    data = with_search(n_trials=2, pruner="none", objective_evals=3)
    params, layout = parse_params(data), Layout(tmp_path)
    search(params, layout)
    for trial in open_study(params, layout).get_trials():
        evals = [trial.intermediate_values[k] for k in sorted(trial.intermediate_values)]
        assert len(evals) == 4 and len(set(evals)) > 1
        assert trial.value == pytest.approx(sum(evals[-3:]) / 3)
    summary = (layout.search_reports / "summary.md").read_text()
    assert "objective: maximize return, mean of the last 3 evaluations" in summary


def test_a_trial_below_the_minibatch_floor_is_pruned_untrained(tmp_path, capsys):
    # 8 envs x 16 steps = 128 transitions: 2 minibatches of 64 pass a floor of 32, 8 of 16 not.
    space = {"algorithm.ppo.num_minibatches": {"type": "categorical", "choices": [2, 8]}}
    small, large = {"algorithm.ppo.num_minibatches": 8}, {"algorithm.ppo.num_minibatches": 2}
    data = with_search(space=space, n_trials=2, enqueue=[small, large], min_minibatch_size=32)
    params, layout = parse_params(data), Layout(tmp_path)
    trained = []

    def counted(trainer, *args, **kwargs):
        trained.append(trainer.cfg.algo.num_minibatches)
        return run_training(trainer, *args, **kwargs)

    summary = search(params, layout, train=counted)

    assert trained == [2]  # the infeasible trial never trained
    first, second = open_study(params, layout).get_trials()
    assert first.state == TrialState.PRUNED and not first.intermediate_values
    why = "minibatches of 16 samples (8 envs x 16 steps / 8) < search.min_minibatch_size 32"
    assert first.user_attrs["infeasible"].startswith(why)
    assert why in capsys.readouterr().out
    assert second.state == TrialState.COMPLETE and summary["best_value"] == second.value


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"space": {"algorithm.ppo.lrate": {"type": "float", "low": 0.1, "high": 0.2}}},
            "search.space.algorithm.ppo.lrate: unknown parameter path",
        ),
        (
            {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0.1, "high": 0.1}}},
            "search.space.algorithm.ppo.lr: empty range: low (0.1) must be < high (0.1)",
        ),
        (
            {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0, "high": 1, "log": True}}},
            "search.space.algorithm.ppo.lr: a log-scale range must be > 0, got low=0",
        ),
        ({"sampler": "grid"}, "search.sampler: Input should be 'tpe', 'random' or 'cmaes'"),
        ({"pruner": "hyperband"}, "search.pruner: Input should be 'median'"),
        ({"min_minibatch_size": 0}, "search.min_minibatch_size: Input should be greater"),
        ({"objective_evals": 0}, "search.objective_evals: Input should be greater"),
        (
            {"space": {"algorithm.ppo.gamma": {"type": "float", "low": 0.9, "high": 2.0}}},
            "search.space.algorithm.ppo.gamma: the value 2.0 is invalid",
        ),
        (
            {"enqueue": [{"algorithm.ppo.lr": 1e-3}, {"algorithm": {"ppo": {"gamma": 0.9}}}]},
            "search.enqueue[1].algorithm.ppo.gamma: not a path of search.space",
        ),
        (
            {"enqueue": [{"algorithm.ppo.lr": 0.5}]},
            "search.enqueue[0].algorithm.ppo.lr: 0.5 is outside the searched float range "
            "[0.0001, 0.01]",
        ),
        (
            {"enqueue": [{"policy.hidden_sizes": [64]}]},
            "search.enqueue[0].policy.hidden_sizes: [64] is outside the searched choices "
            "[[8], [16, 16]]",
        ),
    ],
)
def test_bad_search_space_fails_before_any_trial(changes, line):
    with pytest.raises(ParamsError) as info:
        checked_search(parse_params(with_search(**changes)))
    assert info.value.lines[0].startswith(line), info.value.lines


def run_cli(tmp_path, *args, **popen):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(popen.pop("data", TINY)))
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines", "search", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def test_two_workers_complete_disjoint_trials(tmp_path):
    data = with_search(n_trials=6, pruner="none")
    proc = run_cli(tmp_path, "--workers", "2", data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    study = open_study(parse_params(data), Layout(tmp_path))
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) and 6 <= len(trials) <= 7  # 7: a benign race
    assert all(t.state == TrialState.COMPLETE for t in trials)
    # Both processes ran trials: each line of progress names the trial it finished.
    assert out.count(" complete value ") == len(trials)


def test_killed_worker_leaves_a_loadable_study_that_continues(tmp_path):
    # Slow trials (1,024 steps per evaluation) so the kill lands mid-trial.
    data = with_search(n_trials=3, pruner="none", overrides={"trainer.eval_every_iters": 8})
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 400}
    worker = run_cli(tmp_path, "--worker", data=data, start_new_session=True)  # worker 0
    params, layout = parse_params(data), Layout(tmp_path)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if layout.search_journal.exists():
            running = open_study(params, layout).get_trials(states=(TrialState.RUNNING,))
            if running:
                break
        time.sleep(0.1)
    else:
        pytest.fail("the worker never started a trial")
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()

    # A new search repairs what the kill left (it may have landed mid-write), fails the
    # orphan and completes the study. Nothing opens the journal before it does.
    data["trainer"]["total_env_steps"] = 8 * 16 * 4
    proc = run_cli(tmp_path, data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "left running by a stopped worker: failed and queued again" in out
    trials = open_study(params, layout).get_trials()
    # The orphan's copy runs first and takes its place: n_trials 3 are still all run.
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 3
    assert trials[1].system_attrs["failed_trial"] == 0


def test_a_search_repairs_a_journal_torn_by_a_killed_worker(tmp_path, capsys):
    # What a worker killed inside Optuna's append leaves: its lock and half a line.
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    study = open_study(params, layout)
    orphan = study.ask()
    orphan.report(1.0, 0)
    journal = layout.search_journal
    complete_bytes = journal.read_bytes()
    with journal.open("ab") as f:
        f.write(b'{"op_code":6,"worker_id":"0-')
    Path(f"{journal}.lock").touch()

    summary = search(params, layout)

    out = capsys.readouterr().out
    assert "removed the lock" in out and "dropped a write" in out and "(28 bytes)" in out
    assert journal.read_bytes().startswith(complete_bytes)  # nothing committed was lost
    trials = open_study(params, layout).get_trials()
    assert trials[0].state == TrialState.FAIL and trials[0].intermediate_values == {0: 1.0}
    # The orphan's copy ran too and took its place: the summary counts it, not the orphan.
    assert summary["complete"] == 2 and summary["fail"] == 0 and summary["retried"] == 1
    assert not Path(f"{journal}.lock").exists()


def test_search_cli_rejects_bad_params_with_one_line(tmp_path):
    proc = run_cli(tmp_path, data=with_search(sampler="grid"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2
    assert "search.sampler" in out and "Traceback" not in out


def test_a_study_of_another_params_file_keeps_its_reports_apart(tmp_path):
    """`search --params search/other.yaml` must not touch the default study's reports (DVC
    tracks them): its own go beside them, under its study name."""
    default = with_search(n_trials=2, pruner="none")
    proc = run_cli(tmp_path, data=default)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    summary = (tmp_path / "reports" / "search" / "summary.md").read_text()

    (tmp_path / "search").mkdir()
    other = with_search(n_trials=2, pruner="none", study_name="other study")
    (tmp_path / "search" / "other.yaml").write_text(yaml.safe_dump(other))
    proc = run_cli(tmp_path, "--params", "search/other.yaml", data=default)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "reports: reports/search-other-study/" in out

    own = Layout(tmp_path).for_search_params(tmp_path / "search" / "other.yaml", "other study")
    assert own.search_reports == tmp_path / "reports" / "search-other-study"
    assert own.search_html == tmp_path / "outputs" / "search-other-study" / "html"
    assert own.search_journal == Layout(tmp_path).search_journal  # one journal, many studies
    own_summary = (own.search_reports / "summary.md").read_text()
    assert "# Search: other study" in own_summary and "(2 of `n_trials` 2)" in own_summary
    assert (
        "ran from its own params file" in own_summary and "dvc exp run dvc.yaml" not in own_summary
    )
    assert len(read_trials(own)) == 2
    assert (own.search_html / "optimization_history.html").exists()
    assert own.search_metrics == tmp_path / "metrics" / "search-other-study.json"
    assert own.search_metrics.exists()
    # The default study's reports are untouched, and its params file keeps the plain paths.
    assert (tmp_path / "reports" / "search" / "summary.md").read_text() == summary
    assert Layout(tmp_path).for_search_params(tmp_path / "params.yaml", "x") == Layout(tmp_path)


def test_study_objects_use_the_configured_sampler_and_pruner(tmp_path):
    study = open_study(parse_params(with_search(sampler="random", pruner="none")), Layout(tmp_path))
    assert isinstance(study.sampler, optuna.samplers.RandomSampler)
    assert isinstance(study.pruner, optuna.pruners.NopPruner)
    assert Path(Layout(tmp_path).search_journal).exists()


def test_a_sqlalchemy_url_storage_holds_the_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    params = parse_params(with_search(n_trials=2, pruner="none", storage=url))
    summary = search(params, Layout(tmp_path))
    assert summary["complete"] == 2
    assert len(optuna.load_study(study_name="tiny", storage=url).trials) == 2
    assert not Layout(tmp_path).search_journal.exists()


def test_a_journal_path_storage_holds_the_study_and_resumes_in_another_clone(tmp_path):
    """`search.storage: <path>`: the study's own journal file, relative to the project, which
    can be committed; a clone that has it resumes the study and runs only what it lacks."""
    first, clone = tmp_path / "first", tmp_path / "clone"
    data = with_search(n_trials=2, pruner="none", storage="search/studies/tiny.log")
    assert search(parse_params(data), Layout(first))["complete"] == 2
    journal = first / "search" / "studies" / "tiny.log"
    assert journal.exists() and not Layout(first).search_journal.exists()

    (clone / "search" / "studies").mkdir(parents=True)
    (clone / "search" / "studies" / "tiny.log").write_bytes(journal.read_bytes())
    Path(f"{clone / 'search' / 'studies' / 'tiny.log'}.lock").touch()  # a stale lock, repaired
    data["search"]["n_trials"] = 3
    summary = search(parse_params(data), Layout(clone))
    assert summary["complete"] == 3
    trials = open_study(parse_params(data), Layout(clone)).get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert [t.params for t in trials[:2]] == [
        t.params for t in open_study(parse_params(data), Layout(first)).get_trials()
    ]


@pytest.mark.parametrize("path", ["", "search/studies/"])
def test_a_journal_path_that_names_no_file_is_one_line(path):
    with pytest.raises(ParamsError, match="is not a journal file's path"):
        search_section(parse_params(with_search(storage=path)))


def test_a_journal_path_outside_the_repository_needs_saying_so(tmp_path):
    project, outside = tmp_path / "project", tmp_path / "shared" / "tiny.log"
    data = with_search(storage="../shared/tiny.log")
    with pytest.raises(SearchError, match=r"outside the repository .*allow_outside_repo"):
        journal_path(search_section(parse_params(data)), Layout(project))
    assert not outside.parent.exists()
    data["search"]["allow_outside_repo"] = True
    search = search_section(parse_params(data))
    assert journal_path(search, Layout(project)) == project / "../shared/tiny.log"


def test_an_unusable_storage_url_is_one_clear_error(tmp_path):
    params = parse_params(with_search(storage="nosuchdb://user@host/db"))
    with pytest.raises(SearchError, match=r"SQLAlchemy knows no database 'nosu"):
        search(params, Layout(tmp_path))


def test_worker_seeds_are_distinct_reproducible_and_the_studys_own_for_worker_0():
    seeds = [worker_seed(7, w) for w in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert seeds == [worker_seed(7, w) for w in range(4)]
    resumed = [worker_seed(7, w, finished=5) for w in range(4)]
    assert len(set(seeds + resumed)) == 8
    assert resumed == [worker_seed(7, w, finished=5) for w in range(4)]


def test_a_resumed_study_does_not_redraw_its_first_sessions_trials(tmp_path):
    """Seeded alike, a resumed worker would sample the first session's trials again: the
    HalfCheetah SAC study's first sampled trial after a resume repeated trial 1's values."""
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    calls = itertools.count()

    def ctrl_c_on_the_second(trainer, *args, **kwargs):
        if next(calls) == 1:
            raise KeyboardInterrupt
        return run_training(trainer, *args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c_on_the_second)
    params = parse_params(with_search(n_trials=4, pruner="none", retries=0))  # samples 2
    search(params, layout)
    first, stopped, *later = open_study(params, layout).get_trials()
    assert stopped.state == TrialState.FAIL and len(later) == 2
    assert all(t.params != first.params and t.params != stopped.params for t in later)


def test_parallel_workers_sample_different_trials(tmp_path):
    data = with_search(n_trials=4, pruner="none", sampler="random")
    proc = run_cli(tmp_path, "--workers", "2", data=data)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    trials = open_study(parse_params(data), Layout(tmp_path)).get_trials()
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(params) >= 4 and len(set(params)) == len(params), params


def slow_trials(n_trials):
    """Trials of ~12 s: longer than a worker process takes to start (3-6 s on a loaded
    machine), so the search's own first trial is still running when the worker's starts.
    (At ~3 s it sometimes finished first and took both trials.)"""
    data = with_search(n_trials=n_trials, pruner="none", overrides={"trainer.eval_every_iters": 8})
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 1600}
    return data


def wait_for_running_trials(data, layout, count, timeout=300):
    params = parse_params(data)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if layout.search_journal.exists():
            running = open_study(params, layout).get_trials(states=(TrialState.RUNNING,))
            if len(running) >= count:
                return running
        time.sleep(0.2)
    pytest.fail(f"{count} trials never ran at once")


def children(pid):
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent has yet to reap it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_search(tmp_path):
    data = slow_trials(4)
    proc = run_cli(tmp_path, "--workers", "2", data=data, start_new_session=True)
    try:
        wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the search alone, as `kill -9 <pid>` would
        proc.wait()
        deadline = time.monotonic() + 300
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(worker), "the worker outlived its search"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_search_whose_worker_died_fails_naming_the_lost_trial(tmp_path):
    data = slow_trials(2)
    proc = run_cli(tmp_path, "--workers", "2", data=data, start_new_session=True)
    try:
        running = wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(worker, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    last = out.strip().splitlines()[-1]
    lost = [t.number for t in running]
    assert last.startswith("error: search: worker exit codes [-9]: the study has 1 of 2"), last
    assert any(f"failed or unfinished: [{n}]" in last for n in lost), (last, lost)
    assert "Traceback" not in out
    assert (Layout(tmp_path).search_reports / "trials.csv").exists()  # reports still written


def sigint_as_in_a_terminal() -> None:
    """A child of a shell's background job inherits SIGINT ignored (POSIX), and Python then
    installs no KeyboardInterrupt handler: give the search the default a terminal gives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_the_workers_and_still_writes_the_reports(tmp_path):
    """SIGINT to the search alone (a terminal's Ctrl-C reaches only it: its workers run in
    their own session): it interrupts each worker once, fails the running trials, writes
    the reports of the study so far and exits 130 with one message."""
    data = slow_trials(4)
    proc = run_cli(
        tmp_path,
        "--workers",
        "2",
        data=data,
        start_new_session=True,
        preexec_fn=sigint_as_in_a_terminal,
    )
    try:
        running = wait_for_running_trials(data, Layout(tmp_path), 2)
        (worker,) = children(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and not alive(worker)
    assert out.count("error: search: interrupted") == 1, out
    assert "[search] interrupted with 2 of 4 trials" in out, out
    trials = open_study(parse_params(data), Layout(tmp_path)).get_trials()
    assert {t.number: t.state for t in trials} == {t.number: TrialState.FAIL for t in running}
    rows = read_trials(Layout(tmp_path))
    assert sorted(r["state"] for r in rows) == ["FAIL", "FAIL"]
    summary_md = (Layout(tmp_path).search_reports / "summary.md").read_text()
    stopped = sorted(t.number for t in running)
    assert f"trials {stopped} were stopped by a Ctrl-C and run again on resuming" in summary_md


def test_a_worker_whose_trial_is_failed_underneath_stops_with_one_line(tmp_path):
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)

    def restarted_meanwhile(trainer, *args, **kwargs):
        storage = make_storage(search_section(params), layout)  # a new search's
        study = study_in(storage, search_section(params))
        fail_stale_trials(study, storage, retries=2)
        return run_training(trainer, *args, **kwargs)

    with pytest.raises(SearchError, match="trial 0 was marked failed by another"):
        run_worker(params, layout, worker=1, train=restarted_meanwhile)
    trial, copy = open_study(params, layout).get_trials()
    assert trial.state == TrialState.FAIL and trial.intermediate_values == {}
    assert copy.state == TrialState.WAITING and copy.params == trial.params


def test_a_trial_stopped_by_ctrl_c_runs_again_when_the_study_resumes(tmp_path, capsys):
    """Stopping a study must not cost the stopped trial's place in n_trials, nor its sample:
    the resumed search runs a copy with the same values first, then samples the rest."""
    params, layout = parse_params(with_search(n_trials=3, pruner="none")), Layout(tmp_path)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    (stopped,) = open_study(params, layout).get_trials()
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["interrupted"] is True

    summary = search(params, layout)
    out = capsys.readouterr().out
    assert "trials [0] were stopped by a Ctrl-C: queued again" in out
    # The copy takes the stopped trial's place in the count: 1 of 3 done, not 2.
    assert "trial 1 (a retry of trial 0, which a Ctrl-C stopped) complete" in out
    assert "(1/3 finished)" in out and "(4/3 finished)" not in out
    trials = open_study(params, layout).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] + [TrialState.COMPLETE] * 3
    assert trials[1].params == stopped.params and trials[1].system_attrs["failed_trial"] == 0
    assert trials[1].user_attrs["interrupted"] is False  # copied, then cleared: it ran on
    assert summary["complete"] == 3 and summary["fail"] == 0
    assert summary["trials"] == 3 and summary["retried"] == 1
    summary_md = (layout.search_reports / "summary.md").read_text()
    assert "Trials: 3 complete (3 of `n_trials` 3); 1 stopped trial(s) ran again" in summary_md
    # A second resume queues nothing again: the copy already replaced the stopped trial.
    search(params, layout)
    assert "stopped by a Ctrl-C" not in capsys.readouterr().out
    assert len(open_study(params, layout).get_trials()) == 4


def test_a_retry_that_fails_on_its_own_is_not_queued_again(tmp_path):
    """The copy inherits its original's `interrupted` attribute: only a Ctrl-C of the copy
    itself may mark it so, or a copy whose loss went NaN would be run again."""
    params, layout = parse_params(with_search(n_trials=1, pruner="none")), Layout(tmp_path)

    def diverge(trainer, *args, **kwargs):
        raise NonFiniteError("the loss is nan")

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    assert requeue_stopped(open_study(params, layout), retries=2) == [0]
    run_worker(params, layout, train=diverge)
    _, copy = open_study(params, layout).get_trials()
    assert copy.state == TrialState.FAIL and copy.user_attrs["interrupted"] is False
    assert requeue_stopped(open_study(params, layout), retries=2) == []


@pytest.mark.parametrize("seeds, stop_in_seed", [(1, 0), (2, 1)])
def test_a_stopped_trial_goes_on_from_its_checkpoint_bit_identically(
    tmp_path, monkeypatch, capsys, seeds, stop_in_seed
):
    """A retry of a trial a Ctrl-C stopped trains only what was left, from the stopped
    trial's last checkpoint (in its second seed: the first seed's result kept): its
    evaluations and value equal an unstopped trial's."""
    monkeypatch.setattr(checkpoint_module, "TRIAL_CHECKPOINT_EVERY_S", 0.0)  # at each evaluation
    data = with_search(n_trials=1, pruner="none", seeds_per_trial=seeds)
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 6}  # 6 evaluations
    params = parse_params(data)
    search(params, Layout(tmp_path / "whole"))
    (whole,) = open_study(params, Layout(tmp_path / "whole")).get_trials()

    layout = Layout(tmp_path / "stopped")
    calls = itertools.count()
    trained: list[int] = []  # the iterations each call of run_training trained

    def stop_after_3(trainer, chunk, after_chunk):
        stopping = next(calls) == stop_in_seed

        def then_stop(trainer):
            after_chunk(trainer)
            if stopping and trainer.iteration == 3:
                raise KeyboardInterrupt

        return run_training(trainer, chunk, then_stop)

    def counted(trainer, *args):
        start = trainer.iteration
        reached = run_training(trainer, *args)
        trained.append(trainer.iteration - start)
        return reached

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=stop_after_3)
    checkpoints = trial_checkpoints(layout, search_section(params))
    assert checkpoints == tmp_path / "stopped" / "outputs" / "search-tiny" / "trials"
    assert (checkpoints / "0.pt").exists()
    search(params, layout, train=counted)

    out = capsys.readouterr().out
    assert "trial 1: goes on from trial 0's checkpoint at 384 env steps" in out
    assert trained == [3]  # the 3 iterations left of the stopped seed, not 6 (or 12)
    stopped, copy = open_study(params, layout).get_trials()
    assert len(stopped.intermediate_values) == 6 * stop_in_seed + 3
    assert copy.state == TrialState.COMPLETE and copy.value == whole.value
    assert copy.intermediate_values == whole.intermediate_values
    assert list(checkpoints.iterdir()) == []  # deleted once the trial ended
    # Its duration counts the stopped trial's training up to the checkpoint, not its own
    # segment alone (nor the stopped trial's work after the checkpoint, which was redone).
    earlier = copy.user_attrs["earlier_s"]
    assert 0 < earlier <= stopped.duration.total_seconds()
    with (layout.search_reports / "trials.csv").open() as handle:
        rows = {int(row["number"]): row for row in csv.DictReader(handle)}
    own = copy.duration.total_seconds()
    assert float(rows[1]["duration_s"]) == pytest.approx(own + earlier, abs=1e-3)
    assert f"in {own + earlier:.1f}s" in out


def test_checkpoints_no_retry_will_go_on_from_are_deleted_when_a_search_starts(tmp_path):
    """A checkpoint outlives its trial when the retry ran elsewhere or retries ran out: the
    next search deletes it, and keeps those a queued or running retry still needs."""
    params, layout = parse_params(with_search(n_trials=3, pruner="none")), Layout(tmp_path)
    study = open_study(params, layout)
    ended, stopped, running = study.ask(), study.ask(), study.ask()
    study.tell(ended, 1.0)
    study.tell(stopped, state=TrialState.FAIL)
    queue_again(study, study.get_trials()[stopped.number], retries=2)
    checkpoints = trial_checkpoints(layout, search_section(params))
    checkpoints.mkdir(parents=True)
    for trial in (ended, stopped, running):
        (checkpoints / f"{trial.number}.pt").write_bytes(b"state")
    (checkpoints / "notes.pt").write_bytes(b"not ours")

    assert drop_stale_checkpoints(study, checkpoints) == [ended.number]
    left = sorted(p.name for p in checkpoints.iterdir())
    assert left == sorted([f"{stopped.number}.pt", f"{running.number}.pt", "notes.pt"])


def test_a_retry_starts_over_when_the_params_changed_since_its_checkpoint(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(checkpoint_module, "TRIAL_CHECKPOINT_EVERY_S", 0.0)
    data = with_search(n_trials=1, pruner="none")
    params, layout = parse_params(data), Layout(tmp_path)

    def stop_after_2(trainer, chunk, after_chunk):
        def then_stop(trainer):
            after_chunk(trainer)
            if trainer.iteration == 2:
                raise KeyboardInterrupt

        return run_training(trainer, chunk, then_stop)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=stop_after_2)
    data["trainer"] = {**TINY["trainer"], "eval_episodes": 3}  # edited meanwhile
    search(parse_params(data), layout)

    out = capsys.readouterr().out
    assert "trial 1 starts over: " in out and "written by another configuration" in out
    _, copy = open_study(params, layout).get_trials()
    assert copy.state == TrialState.COMPLETE and len(copy.intermediate_values) == 4
    assert list(trial_checkpoints(layout, search_section(params)).iterdir()) == []


def test_a_trial_stopped_more_than_retries_times_is_not_queued_again(tmp_path):
    params = parse_params(with_search(n_trials=1, pruner="none", retries=0))
    layout = Layout(tmp_path)

    with pytest.raises(KeyboardInterrupt):
        run_worker(params, layout, train=ctrl_c)
    assert requeue_stopped(open_study(params, layout), retries=0) == []
    assert [t.state for t in open_study(params, layout).get_trials()] == [TrialState.FAIL]


def test_optuna_dashboard_opens_the_search_storage(tmp_path):
    """What `optuna-dashboard outputs/search/journal.log` serves, through its WSGI app."""
    import io
    import json as jsonlib
    from wsgiref.util import setup_testing_defaults

    dashboard = pytest.importorskip("optuna_dashboard")
    from optuna_dashboard._storage_url import get_storage  # what its command line calls

    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    search(params, layout)
    app = dashboard.wsgi(get_storage(str(layout.search_journal)))
    environ = {"PATH_INFO": "/api/studies", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status == ["200 OK"]
    studies = jsonlib.loads(body)["study_summaries"]
    assert [s["study_name"] for s in studies] == ["tiny"]


REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("task", ["halfcheetah", "hopper"])
def test_the_mujoco_search_runs_its_enqueued_trials_first(tmp_path, task):
    """A tiny version of search/mujoco_<task>-ppo.yaml: RL Zoo's settings and the other
    enqueued ones (our presets'), then a sampled trial, all evaluated at the same env steps."""
    pytest.importorskip("mujoco")
    data = yaml.safe_load((REPO / "search" / f"mujoco_{task}-ppo.yaml").read_text())
    queued = len(data["search"]["enqueue"])
    data["trainer"] = {"total_env_steps": 4096, "eval_episodes": 1}
    data["search"] |= {"n_trials": queued + 1, "eval_every_env_steps": 2048}
    data["search"]["startup_trials"] = queued + 1
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["complete"] == queued + 1
    *enqueued, sampled = open_study(params, layout).get_trials()
    zoo, family = enqueued[0], enqueued[-1]
    assert zoo.params["trainer.num_steps"] == "512" and zoo.params["env.num_envs"] == "1"
    assert zoo.params["algorithm.ppo.normalize_reward"] == "true"
    assert family.params["algorithm.ppo.lr"] == 3e-4 and family.params["env.num_envs"] == "8"
    assert all("enqueued" in t.user_attrs for t in enqueued)
    assert "enqueued" not in sampled.user_attrs
    for trial in enqueued:  # each evaluated after 2,048 and 4,096 env steps
        assert sorted(trial.intermediate_values) == [1, 2]


def test_the_sac_search_runs_rl_zoos_settings_first(tmp_path):
    """A tiny version of search/mujoco_halfcheetah-sac.yaml (UTD and warm-up shrunk)."""
    pytest.importorskip("mujoco")
    data = yaml.safe_load((REPO / "search" / "mujoco_halfcheetah-sac.yaml").read_text())
    data["trainer"] = {"total_env_steps": 1536, "eval_episodes": 1}
    data["search"] |= {"n_trials": 2, "eval_every_env_steps": 768, "startup_trials": 2}
    data["search"]["enqueue"][0]["replay"] |= {"warmup_steps": 1000, "batch_size": 128}
    space = data["search"]["space"]  # the sampled trial: the space's cheaper half
    space["replay"]["updates_per_step"]["choices"] = [0.5, 1.0]
    space["replay"]["batch_size"]["choices"] = [128, 256]
    space["policy"]["hidden_sizes"]["choices"] = [[256, 256]]
    params, layout = parse_params(data), Layout(tmp_path)
    assert search(params, layout)["complete"] == 2
    zoo, sampled = open_study(params, layout).get_trials()
    assert zoo.params["trainer.num_steps"] == "1" and zoo.params["algorithm.sac.lr"] == 3e-4
    assert sorted(zoo.intermediate_values) == [1, 2] and "enqueued" not in sampled.user_attrs


def test_a_final_evaluation_inside_the_last_reported_interval_is_not_reported_twice(tmp_path):
    """640 env steps evaluated every 256: reports at steps 1 (256) and 2 (512); the final
    evaluation (640, also step 2) is the objective, not a second report Optuna would warn
    about and ignore."""
    data = with_search(n_trials=1, pruner="none", eval_every_env_steps=256)
    data["trainer"] = {**TINY["trainer"], "total_env_steps": 8 * 16 * 5}
    params, layout = parse_params(data), Layout(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert search(params, layout)["complete"] == 1
    assert not [w for w in caught if "already reported" in str(w.message)]
    (trial,) = open_study(params, layout).get_trials()
    assert sorted(trial.intermediate_values) == [1, 2]


def test_a_study_across_tasks_scores_each_trial_on_every_task(tmp_path):
    """With `search.tasks` every trial trains on each task (env.name replaced) and its value
    is the mean of the tasks' normalised final returns."""
    tasks = [
        {"env": "cartpole", "low": 20.0, "high": 500.0},
        {"env": "pendulum", "low": -1500.0, "high": -200.0},
    ]
    data = with_search(n_trials=2, pruner="none", tasks=tasks)
    params, layout = parse_params(data), Layout(tmp_path)
    finals: list[tuple[str, float]] = []  # (env, final return) of each training, in order

    def recorded(trainer, *args, **kwargs):
        reached = run_training(trainer, *args, **kwargs)
        finals.append((trainer.cfg.env.name, trainer.last_eval["eval/episode_return"]))
        return reached

    search(params, layout, train=recorded)

    assert [env for env, _ in finals] == ["cartpole", "pendulum"] * 2
    trials = open_study(params, layout).trials
    for trial, runs in zip(trials, (finals[:2], finals[2:]), strict=True):
        (_, cartpole), (_, pendulum) = runs
        scores = [(cartpole - 20.0) / 480.0, (pendulum + 1500.0) / 1300.0]
        assert trial.user_attrs["score cartpole"] == pytest.approx(scores[0])
        assert trial.user_attrs["score pendulum"] == pytest.approx(scores[1])
        assert trial.value == pytest.approx(sum(scores) / 2)
    rows = read_trials(layout)
    assert float(rows[1]["score pendulum"]) == pytest.approx(
        open_study(params, layout).trials[1].user_attrs["score pendulum"]
    )
    summary = (layout.search_reports / "summary.md").read_text()
    assert "mean over 2 tasks (cartpole, pendulum) of the normalised" in summary
    assert "Its score per task" in summary


@pytest.mark.parametrize(
    "tasks, words",
    [
        ([{"env": "cartpole", "low": 1.0, "high": 1.0}], "no scale"),
        (
            [{"env": "cartpole", "low": 0, "high": 1}, {"env": "cartpole", "low": 0, "high": 2}],
            "more than once",
        ),
    ],
)
def test_search_tasks_bad_input_is_refused_in_one_line(tasks, words):
    with pytest.raises(ParamsError, match=words):
        search_section(parse_params(with_search(tasks=tasks)))
