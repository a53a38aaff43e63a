"""Every training iteration's metrics reach DVCLive and TensorBoard, by their fixed names,
against env steps; a resumed run logs each step once; a new run never erases an earlier
run's TensorBoard events, and each run holds its params."""

import csv

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import plugin_data_pb2

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.telemetry import Telemetry
from pipelines.stages.train import train
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


def runs(layout):
    """The seed's TensorBoard run directories, by name."""
    return sorted(
        path.parent.name for path in layout.tensorboard_runs.glob(f"*/seed_{layout.seed}")
    )


# TINY outside git: its params beyond cartpole's preset, the name cut and hashed.
NAME = "tiny__env.num_envs=8,policy.hidden_sizes=16,ppo.num_epochs=1,ppo.num_minibatches=2,"


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
    (run,) = runs(layout)
    assert run.startswith(NAME)
    board = scalars(layout.tensorboard(run))
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
    (run,) = runs(layout)  # the resumed run continued the interrupted one's
    assert sorted(s for s, _ in scalars(layout.tensorboard(run))["loss/policy"]) == STEPS


def test_a_resumed_run_continues_its_own_directory_beside_an_earlier_runs(tmp_path, monkeypatch):
    layout = Layout(tmp_path)
    train(parse_params(TINY), layout)
    (first,) = runs(layout)
    interrupt_in_iteration_6(layout, monkeypatch)
    train(parse_params(TINY), layout)
    assert runs(layout) == [first, f"{first}__run2"]
    for run in runs(layout):
        assert sorted(s for s, _ in scalars(layout.tensorboard(run))["loss/policy"]) == STEPS


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
    (run,) = runs(layout)
    assert run.startswith("wider-net__env.num_envs=8,")
    assert "loss/policy" in scalars(layout.tensorboard(run))
    other = Layout(tmp_path / "off")
    train(parse_params({**TINY, "runtime": {"dvclive": False, "tensorboard": False}}), other)
    assert not (other.root / "outputs" / "tensorboard").exists()


def test_a_new_run_of_a_name_never_erases_the_events_of_an_earlier_one(tmp_path):
    layout = Layout(tmp_path)
    for _ in range(3):
        train(parse_params(TINY), layout)
    first = runs(layout)[0]
    assert runs(layout) == [first, f"{first}__run2", f"{first}__run3"]
    for run in runs(layout):
        assert [step for step, _ in scalars(layout.tensorboard(run))["loss/policy"]] == STEPS
    # Another seed of the same run goes beside the first seed's, not into a run of its own.
    other = Layout(tmp_path, seed=1)
    train(parse_params({**TINY, "seeds": [0, 1]}), other)
    assert runs(other) == [first]


def test_each_run_holds_its_params_as_hparams_and_as_a_table(tmp_path):
    layout = Layout(tmp_path)
    train(parse_params(TINY), layout)
    (run,) = runs(layout)
    values = {}
    for path in layout.tensorboard(run).glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                meta = value.metadata.plugin_data
                if meta.plugin_name == "hparams":
                    data = plugin_data_pb2.HParamsPluginData.FromString(meta.content)
                    if data.HasField("session_start_info"):
                        values = dict(data.session_start_info.hparams)
                elif meta.plugin_name == "text":
                    table = value.tensor.string_val[0].decode()
    assert values["algorithm.ppo.num_epochs"].number_value == 1
    assert values["seed"].number_value == 0
    assert values["env.name"].string_value == "cartpole"
    assert values["policy.hidden_sizes"].string_value == "[16]"
    assert values["trainer.stop_at_eval_return"].number_value == 475  # cartpole's preset
    assert "| env.num_envs | 8 |" in table.splitlines()


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
