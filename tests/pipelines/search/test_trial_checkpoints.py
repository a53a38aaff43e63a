"""A stopped trial's retry goes on from its checkpoint
(`pipelines.search.trial_checkpoints`)."""

import csv
import itertools

import pytest
from optuna.trial import TrialState

import pipelines.search.trial_checkpoints as checkpoint_module
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.recovery import queue_again
from pipelines.search.space import search_section
from pipelines.search.stage import search
from pipelines.search.study import open_study
from pipelines.search.trial_checkpoints import drop_stale_checkpoints, trial_checkpoints
from pipelines.search.worker import run_worker
from pipelines.stages.train import run_training
from tests.pipelines.search.tiny_study import TINY, with_search


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
