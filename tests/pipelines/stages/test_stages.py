import csv
import json
import statistics

import imageio.v3 as iio
import pytest
import torch

from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.stages.evaluate import evaluate
from pipelines.stages.report import report
from pipelines.stages.train import train
from pipelines.stages.video import record, tile
from rlcore.checkpoint import load_checkpoint
from rlcore.config import TrainerConfig
from rlcore.runtime import cpu_model
from rlcore.trainer import Trainer

TINY = {
    "name": "tiny",
    "preset": "none",  # the library's defaults: no stop target from the cartpole preset
    "env": {"name": "cartpole", "num_envs": 8},
    "policy": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"ppo": {"lr": 1e-3, "num_epochs": 2, "num_minibatches": 2}},
    "trainer": {
        "total_env_steps": 8 * 16 * 6,  # 6 iterations
        "num_steps": 16,
        "eval_every_iters": 2,
        "eval_episodes": 4,
        "checkpoint_every_iters": 2,
    },
    "evaluation": {"episodes": 5, "seed": 123},
    "video": {"episodes": 3, "columns": 2, "frame_size": 48, "max_steps": 20, "fps": 10},
}


@pytest.fixture
def params():
    return parse_params(TINY)


def policy_weights(path):
    return load_checkpoint(path)["policy"]


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


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_evaluate_video_and_report_from_trained_checkpoints(tmp_path):
    params = parse_params({**TINY, "seeds": [3, 5]})
    root = Layout(tmp_path)
    for seed in (3, 5):
        train(params, root.for_seed(seed))
    layout = root.for_seed(3)

    metrics = evaluate(params, layout)
    assert metrics["episodes"] == 5
    assert metrics["return_min"] <= metrics["return_mean"] <= metrics["return_max"]
    assert 1 <= metrics["length_mean"] <= 500
    assert json.loads(layout.eval_metrics.read_text()) == metrics
    again = evaluate(params, layout)
    assert {**again, "wall_s": 0} == {**metrics, "wall_s": 0}  # deterministic
    other = evaluate(params, root.for_seed(5))

    video = record(params, root)  # the first seed's policy
    frames = iio.imread(root.video)
    assert frames.shape[0] == video["frames"]
    assert json.loads(root.video_metrics.read_text()) == video
    # 3 episodes on a 2-column grid of 48 px cells with 2 px borders: 2 rows.
    assert frames.shape[1:] == (2 * 48 + 3 * 2, 2 * 48 + 3 * 2, 3)
    assert 2 <= frames.shape[0] <= 21

    page = report(params, root).read_text()
    returns = [metrics["return_mean"], other["return_mean"]]
    mean, std = statistics.fmean(returns), statistics.stdev(returns)
    assert "# tiny" in page and "seeds [3, 5]" in page
    assert "768 env steps budget (6 iterations)," in page
    assert f"return **{mean:.2f} ± {std:.2f}** over 2 seeds" in page
    assert f"| 3 | {metrics['return_mean']:,.1f} |" in page
    assert f"| **mean ± std** | {mean:,.1f} ± {std:,.1f} |" in page
    summary = json.loads(root.summary_metrics.read_text())
    assert summary["seeds"] == 2 and summary["env_steps_mean"] == 768
    assert summary["eval_return_mean"] == pytest.approx(mean)
    assert summary["eval_return_std"] == pytest.approx(std)
    assert "![learning curve](curve.png)" in page
    assert png_size(root.curve_png) == (800, 450)
    assert "../../outputs/video/episodes.mp4" in page
    kernels = torch.backends.cpu.get_cpu_capability()
    assert f"Trained on {cpu_model()} (torch kernels {kernels}, " in page
    assert f", torch {torch.__version__}" in page

    # Seeds trained on different machines are named one by one; a run from before
    # provenance was recorded has none and is left out of the line.
    other_machine = json.loads(root.for_seed(5).provenance.read_text())
    other_machine["cpu_kernels"] = "AVX2"
    root.for_seed(5).provenance.write_text(json.dumps(other_machine))
    page = report(params, root).read_text()
    assert f"Trained on seed 3: {cpu_model()} (torch kernels {kernels}, " in page
    assert f"seed 5: {cpu_model()} (torch kernels AVX2, " in page
    root.for_seed(5).provenance.unlink()
    page = report(params, root).read_text()
    assert "Trained on seed 3: " in page and "seed 5:" not in page


def test_tile_lays_frames_out_row_major_with_even_sides():
    frames = torch.zeros(3, 5, 5, 3, dtype=torch.uint8)
    for i in range(3):
        frames[i] = 10 * (i + 1)
    grid = tile(frames, columns=2)
    assert grid.shape == (2 * 5 + 3 * 2, 2 * 5 + 3 * 2, 3)  # 16 x 16: already even
    assert grid[2, 2, 0] == 10 and grid[2, 9, 0] == 20 and grid[9, 2, 0] == 30
    assert grid[9, 9, 0] == 40  # the empty cell keeps the border gray
    odd = tile(torch.zeros(1, 5, 5, 3, dtype=torch.uint8), columns=1)
    assert odd.shape[0] % 2 == 0 and odd.shape[1] % 2 == 0


def test_stages_need_their_inputs(params, tmp_path):
    layout = Layout(tmp_path)
    with pytest.raises(FileNotFoundError, match="run the `train` stage first"):
        evaluate(params, layout)
    with pytest.raises(FileNotFoundError, match=r"train\.json is missing: run the `train` stage"):
        report(params, layout)


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


def test_the_report_says_the_budget_training_runs_in_whole_iterations():
    from pipelines.stages.report import _budget

    rounded = parse_params({**TINY, "trainer": {**TINY["trainer"], "total_env_steps": 1000}})
    assert _budget(rounded) == (
        "896 env steps budget (7 iterations; trainer.total_env_steps 1,000 rounded to whole "
        "iterations)"
    )
    stopping = parse_params(
        {**TINY, "env": {"name": "push_cube", "num_envs": 8}, "trainer": {
            **TINY["trainer"], "stop_at_eval_return": -10.0, "stop_at_eval_success": 0.9}}
    )  # fmt: skip
    assert _budget(stopping).endswith(
        "(6 iterations), stopping early at evaluation return >= -10 or evaluation success >= 0.9"
    )


def test_no_value_in_the_report_starts_a_line_where_it_would_read_as_markup():
    """A wrapped line that starts with `1.` is an ordered list in CommonMark and GitHub's
    Markdown (the video paragraph once ended a line before its seed: seed 1 made a list)."""
    from markdown_it import MarkdownIt

    from pipelines.compare.aggregate import SeedRun
    from pipelines.stages.report import render_report

    params = parse_params({**TINY, "seeds": [1]})
    seed = SeedRun(1, train={"env_steps": 768.0}, evaluation={"return_mean": 9.0, "episodes": 5})
    text = render_report(params, Layout(), [seed])
    blocks = {token.type for token in MarkdownIt("commonmark").parse(text)}
    assert "ordered_list_open" not in blocks and "bullet_list_open" not in blocks


def test_the_curve_shows_success_where_the_env_reports_it():
    from pipelines.compare.aggregate import SeedRun
    from pipelines.stages.report import _curve_metric

    nan = float("nan")
    cartpole = [{"env_steps": 1.0, "eval_return": 9.0, "eval_success_rate": nan}]
    push_cube = [{"env_steps": 1.0, "eval_return": -50.0, "eval_success_rate": 0.25}]
    assert _curve_metric([SeedRun(0, curve=cartpole)]) == ("eval_return", "return")
    assert _curve_metric([SeedRun(0, curve=[{"env_steps": 1.0, "eval_return": 9.0}])])[1] == (
        "return"
    )
    assert _curve_metric([SeedRun(0, curve=push_cube)]) == ("eval_success_rate", "success rate")


def test_agent_view_shows_the_actors_newest_frame_beside_the_scene():
    """Each camera image the actor reads is scaled to the frame size by nearest neighbour:
    every camera pixel becomes a sharp block; a stacked image shows its newest frame, a
    gray one in gray."""
    from pipelines.stages.video import agent_view

    rgb = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    stacked = torch.cat([torch.zeros_like(rgb), rgb], dim=1)  # 2 frames: the newest last
    gray = torch.randint(0, 256, (2, 1, 4, 4), dtype=torch.uint8)
    view = agent_view([stacked, gray], size=8)
    assert view.shape == (2, 8, 16, 3)
    assert torch.equal(view[:, ::2, 0:8:2], rgb.permute(0, 2, 3, 1))
    assert torch.equal(view[:, 1::2, 1:8:2], rgb.permute(0, 2, 3, 1))
    assert torch.equal(view[:, ::2, 8::2], gray[:, 0, :, :, None].expand(-1, -1, -1, 3))
