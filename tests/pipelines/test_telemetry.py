"""Every training iteration's metrics reach DVCLive and TensorBoard, by their fixed names,
against env steps; a resumed run logs each step once."""

import csv

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.telemetry import Telemetry
from pipelines.train import train
from rlcore.trainer import Trainer

TINY = {
    "name": "tiny",
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16]},
    "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2}},
    "trainer": {"total_env_steps": 8 * 16 * 6, "num_steps": 16, "eval_every_iters": 2,
                "eval_episodes": 4, "checkpoint_every_iters": 2},
    "runtime": {"log_every_iters": 1},  # auto would log every 8th of these tiny iterations
}  # fmt: skip
STEPS = [128 * i for i in range(1, 7)]  # 8 envs x 16 steps per iteration


def tsv(layout, name, directory=None):
    path = (directory or layout.live_metrics) / "plots" / "metrics" / f"{name}.tsv"
    with path.open(newline="") as handle:
        return [(int(r["step"]), float(r[name.split("/")[-1]])) for r in csv.DictReader(
            handle, delimiter="\t")]  # fmt: skip


def scalars(directory):
    events = EventAccumulator(str(directory))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_every_iteration_is_logged_to_dvclive_and_tensorboard(tmp_path):
    layout = Layout(tmp_path)
    train(parse_params(TINY), layout)
    for name in ("loss/policy", "loss/value", "stats/approx_kl", "time/sps", "train/lr"):
        assert [step for step, _ in tsv(layout, name)] == STEPS, name
    evaluations = tsv(layout, "eval/episode_return")
    assert [step for step, _ in evaluations] == [256, 512, 768]
    with layout.curve.open() as handle:  # the same evaluations as the learning curve
        curve = [float(r["eval_return"]) for r in csv.DictReader(handle)]
    assert [value for _, value in evaluations] == pytest.approx(curve)
    board = scalars(layout.tensorboard("tiny"))
    assert [step for step, _ in board["loss/policy"]] == STEPS
    logged = tsv(layout, "loss/policy")
    assert [v for _, v in board["loss/policy"]] == pytest.approx([v for _, v in logged])
    assert [value for _, value in board["eval/episode_return"]] == pytest.approx(curve)


def interrupt_in_iteration_6(layout, monkeypatch):
    """Train TINY until a Ctrl-C in iteration 6 (its progress was saved after iteration 4)."""
    real_iteration = Trainer._train_iteration

    def crash_in_iteration_6(self):
        if self.iteration == 5:
            raise KeyboardInterrupt
        real_iteration(self)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_iteration", crash_in_iteration_6)
        with pytest.raises(KeyboardInterrupt):
            train(parse_params(TINY), layout)


def test_a_resumed_run_logs_each_step_once(tmp_path, monkeypatch):
    layout = Layout(tmp_path)
    interrupt_in_iteration_6(layout, monkeypatch)
    assert not layout.live_metrics.exists()  # published only with the other outputs
    assert [s for s, _ in tsv(layout, "loss/policy", layout.live_partial)] == STEPS[:5]
    train(parse_params(TINY), layout)
    assert [s for s, _ in tsv(layout, "loss/policy")] == STEPS  # 5 logged, 4 saved, 1 dropped
    assert not layout.live_partial.exists()
    assert [s for s, _ in tsv(layout, "eval/episode_return")] == [256, 512, 768]
    board = scalars(layout.tensorboard("tiny"))
    assert sorted(s for s, _ in board["loss/policy"]) == STEPS


def test_a_run_killed_mid_write_resumes_past_its_torn_dvclive_files(tmp_path, monkeypatch):
    layout = Layout(tmp_path)
    interrupt_in_iteration_6(layout, monkeypatch)
    # What a SIGKILL mid-write leaves: half a summary, half a row.
    summary = layout.live_partial / "metrics.json"
    summary.write_text(summary.read_text()[:20])
    policy = layout.live_partial / "plots" / "metrics" / "loss" / "policy.tsv"
    with policy.open("a") as handle:
        handle.write("7")
    train(parse_params(TINY), layout)
    assert [s for s, _ in tsv(layout, "loss/policy")] == STEPS


def files_of(directory):
    return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_a_failed_run_leaves_the_published_dvclive_files_as_they_were(tmp_path, monkeypatch):
    layout = Layout(tmp_path)
    train(parse_params(TINY), layout)
    before = files_of(layout.live_metrics)
    assert len(before) > 5

    def fail(self):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(Trainer, "_train_iteration", fail)
    other = {**TINY, "algorithm": {"ppo": {"num_epochs": 1, "num_minibatches": 2, "lr": 1e-4}}}
    with pytest.raises(RuntimeError, match="simulated"):
        train(parse_params(other), layout)  # another configuration: a new run, not a resume
    assert files_of(layout.live_metrics) == before


def test_off_switches_and_the_experiment_name_of_dvc_exp_run(tmp_path, monkeypatch):
    monkeypatch.setenv("DVC_EXP_NAME", "wider-net")
    layout = Layout(tmp_path)
    train(parse_params({**TINY, "runtime": {"dvclive": False}}), layout)
    assert not layout.live_metrics.exists()
    assert "loss/policy" in scalars(layout.tensorboard("wider-net"))
    other = Layout(tmp_path / "off")
    train(parse_params({**TINY, "runtime": {"dvclive": False, "tensorboard": False}}), other)
    assert not (other.root / "outputs" / "tensorboard").exists()


def test_log_every_averages_training_metrics_and_logs_evaluations_at_once(tmp_path):
    telemetry = Telemetry(tmp_path / "live", None, every=2)
    for step, loss in ((10, 1.0), (20, 3.0), (30, 5.0)):
        telemetry(step, {"loss/critic": loss})
    telemetry(30, {"eval/episode_return": -150.0})
    telemetry.close(35)  # the pending third iteration is logged at the end
    path = tmp_path / "live" / "plots" / "metrics" / "loss" / "critic.tsv"
    rows = list(csv.DictReader(path.open(newline=""), delimiter="\t"))
    assert [(int(r["step"]), float(r["critic"])) for r in rows] == [(20, 2.0), (35, 5.0)]
    path = tmp_path / "live" / "plots" / "metrics" / "eval" / "episode_return.tsv"
    rows = list(csv.DictReader(path.open(newline=""), delimiter="\t"))
    assert [(int(r["step"]), float(r["episode_return"])) for r in rows] == [(30, -150.0)]
