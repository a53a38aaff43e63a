"""The `train` stage: checkpoints, learning curve and metrics, resuming, the best
checkpoint, and the bar it shows."""

import csv
import json

import pytest
import torch

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.evaluate import evaluate
from pipelines.stages.train import train
from rlcore.checkpoint import load_checkpoint
from rlcore.config import TrainerConfig
from rlcore.trainer import Trainer
from tests.pipelines.stages.tiny_experiment import TINY, policy_weights


def test_train_writes_checkpoint_curve_and_metrics(params, tmp_path, capsys):
    layout = Layout(tmp_path)
    metrics = train(params, layout)
    assert metrics["iterations"] == 6 and metrics["env_steps"] == 6 * 8 * 16
    assert json.loads(layout.train_metrics.read_text()) == metrics
    with layout.curve.open() as handle:
        rows = list(csv.DictReader(handle))
    # Evaluations after iterations 2, 4 and 6; wall time grows along the curve.
    assert [int(float(r["env_steps"])) for r in rows] == [256, 512, 768]
    assert float(rows[0]["wall_s"]) <= float(rows[-1]["wall_s"])
    assert float(rows[-1]["eval_return"]) == metrics["eval_return"]
    assert layout.final_checkpoint.is_file() and not layout.resume_checkpoint.exists()
    assert "eval return" in capsys.readouterr().out  # progress is shown
    # Where it ran: what single runs repeat on (the kernels torch picked, the releases).
    machine = json.loads(layout.provenance.read_text())
    assert machine["cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
    assert machine["torch_threads"] == torch.get_num_threads()
    assert machine["packages"]["torch"] == torch.__version__ and "gpu" not in machine


def interrupt_in_iteration_5(params, layout, monkeypatch):
    """Run the train stage until a KeyboardInterrupt in iteration 5 (progress saved at 4)."""
    real_iteration = Trainer._train_iteration

    def crash_in_iteration_5(self):
        if self.iteration == 4:
            raise KeyboardInterrupt
        real_iteration(self)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_iteration", crash_in_iteration_5)
        with pytest.raises(KeyboardInterrupt):
            train(params, layout)


def test_interrupted_training_keeps_old_outputs_and_resumes_exactly(params, tmp_path, monkeypatch):
    straight = Layout(tmp_path / "straight")
    train(params, straight)

    layout = Layout(tmp_path / "interrupted")
    layout.final_checkpoint.parent.mkdir(parents=True)
    layout.final_checkpoint.write_bytes(b"previous run")
    layout.train_metrics.parent.mkdir(parents=True)
    layout.train_metrics.write_text('{"previous": 1}')
    interrupt_in_iteration_5(params, layout, monkeypatch)
    # Nothing of the previous run was replaced; progress up to iteration 4 was saved.
    assert layout.final_checkpoint.read_bytes() == b"previous run"
    assert layout.train_metrics.read_text() == '{"previous": 1}'
    assert load_checkpoint(layout.resume_checkpoint)["iteration"] == 4

    resumed = train(params, layout)
    assert resumed["iterations"] == 6 and not layout.resume_checkpoint.exists()
    a, b = policy_weights(straight.final_checkpoint), policy_weights(layout.final_checkpoint)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    a, b = policy_weights(straight.best_checkpoint), policy_weights(layout.best_checkpoint)
    for key in a:  # the best evaluation before the interruption was kept in the progress
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    assert layout.curve.read_text().count("\n") == straight.curve.read_text().count("\n")


def test_progress_of_another_configuration_is_not_resumed(params, tmp_path, capsys):
    layout = Layout(tmp_path)
    other = parse_params({**TINY, "algorithm": {"ppo": {"lr": 5e-4}}})
    trainer = Trainer(other.experiment())
    trainer.run(max_iters=2)
    layout.checkpoints.mkdir(parents=True)
    trainer.save(layout.resume_checkpoint)
    assert train(params, layout)["iterations"] == 6
    assert "not resuming" in capsys.readouterr().out


def test_grpo_experiment_trains_and_evaluates_an_actor_only_policy(tmp_path):
    tiny_grpo = {**TINY, "algorithm": {"name": "grpo", "grpo": {"group_size": 4}}}
    params, layout = parse_params(tiny_grpo), Layout(tmp_path)
    train(params, layout)
    weights = policy_weights(layout.final_checkpoint)
    assert any(k.startswith("actor.") for k in weights)
    assert not any(k.startswith("critic.") for k in weights)
    assert evaluate(params, layout)["episodes"] == 5


def test_an_eager_run_resumes_with_runtime_compile_switched_on(tmp_path, monkeypatch, capsys):
    layout = Layout(tmp_path)
    interrupt_in_iteration_5(parse_params(TINY), layout, monkeypatch)
    capsys.readouterr()

    compiled = parse_params({**TINY, "runtime": {"compile": True}})
    assert compiled.runtime.compile and compiled.experiment() == parse_params(TINY).experiment()
    metrics = train(compiled, layout)
    out = capsys.readouterr().out
    assert "resuming from" in out and "iteration 4" in out
    assert "the first update compiles its steps" in out
    assert metrics["iterations"] == 6 and not layout.resume_checkpoint.exists()


def test_runtime_compile_auto_compiles_only_runs_long_enough_and_says_why(
    tmp_path, monkeypatch, capsys
):
    params = parse_params(TINY | {"runtime": {"compile": "auto"}})
    train(params, Layout(tmp_path / "short"))
    out = capsys.readouterr().out
    assert "[train] runtime.compile auto: eager (24 minibatch steps planned, too few" in out
    # The same run where 24 minibatch steps pay back compiling: it trains compiled.
    monkeypatch.setattr("rlcore.algos.config.AUTO_COMPILE_MIN_STEPS", 24)
    built = []
    real_trainer = train.__globals__["Trainer"]

    def recording(*args, **kwargs):
        built.append(kwargs["compile_loss"])
        return real_trainer(*args, **kwargs)

    monkeypatch.setitem(train.__globals__, "Trainer", recording)
    metrics = train(params, Layout(tmp_path / "long"))
    out = capsys.readouterr().out
    assert built == [True]
    assert "[train] runtime.compile auto (24 minibatch steps planned): the first update" in out
    assert metrics["iterations"] == 6


def test_best_checkpoint_holds_the_policy_of_the_best_evaluation(tmp_path):
    layout = Layout(tmp_path)
    metrics = train(parse_params(TINY), layout)
    with layout.curve.open() as handle:
        rows = [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(handle)]
    best_row = max(rows, key=lambda r: r["eval_return"])  # the first of equal returns
    best = load_checkpoint(layout.best_checkpoint)
    assert best["env_steps"] == best_row["env_steps"] == metrics["best_env_steps"]
    assert best["eval"]["eval/episode_return"] == best_row["eval_return"]
    assert metrics["best_eval_return"] == best_row["eval_return"]
    # evaluation.checkpoint: best evaluates that policy (on the evaluation seeds).
    params = parse_params({**TINY, "evaluation": {**TINY["evaluation"], "checkpoint": "best"}})
    from_best = evaluate(params, layout)
    from_final = evaluate(parse_params(TINY), layout)
    final = load_checkpoint(layout.final_checkpoint)
    assert best["env_steps"] < metrics["env_steps"]  # this run peaked before its end
    assert any(not torch.equal(best["policy"][k], v) for k, v in final["policy"].items())
    assert from_best["return_mean"] != from_final["return_mean"]


def test_the_train_bar_counts_down_to_the_stop_target_its_evaluations_head_for():
    import io

    from pipelines.stages.progress import Progress, StopTarget
    from pipelines.stages.train import Curve

    now = [0.0]
    out = io.StringIO()
    progress = Progress(
        "train", 100_000, "steps", stream=out, interval_s=3600, clock=lambda: now[0],
        stop=StopTarget(TrainerConfig(stop_at_eval_return=-200).stop_at()),
    )  # fmt: skip
    curve = Curve(total_env_steps=100_000, progress=progress)
    for steps, ret in ((10_000, -500.0), (20_000, -400.0), (30_000, -300.0)):
        now[0] = steps / 1000  # 1,000 steps/s
        curve(steps, {"train/episode_return": ret})
        curve(steps, {"eval/episode_return": ret, "eval/episode_return_min": ret})
    # The line through (10k, -500), (20k, -400), (30k, -300) meets -200 at 40k: 10 s on.
    assert progress.line().endswith("ETA 0:10 to return -200 (budget 1:10)")
    assert "eval return  -300.00" in out.getvalue()


def test_the_compile_note_says_when_the_collection_runs_as_a_cuda_graph():
    from pipelines.stages.train import _compile_note

    graphed = _compile_note(True, True, "", graphed=True)
    assert graphed.endswith("; collection runs as one CUDA graph from the second rollout")
    assert "CUDA graph" not in _compile_note(True, True, "")
    assert _compile_note("auto", False, "too few steps") == (
        "[train] runtime.compile auto: eager (too few steps)"
    )
    assert _compile_note(False, False, "") == ""
