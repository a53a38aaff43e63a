"""Tests that span the stages after `train`: `evaluate`, `video` and `report` run from
trained checkpoints, and what each of them asks for when `train` has not run. They check
all of these stages at once, so they live here rather than in one stage's module."""

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
from pipelines.stages.video import record
from rlcore.runtime import cpu_model
from tests.pipelines.stages.tiny_experiment import TINY


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
    elsewhere = "AVX512" if kernels == "AVX2" else "AVX2"  # not this machine's kernels
    other_machine["cpu_kernels"] = elsewhere
    root.for_seed(5).provenance.write_text(json.dumps(other_machine))
    page = report(params, root).read_text()
    assert f"Trained on seed 3: {cpu_model()} (torch kernels {kernels}, " in page
    assert f"seed 5: {cpu_model()} (torch kernels {elsewhere}, " in page
    root.for_seed(5).provenance.unlink()
    page = report(params, root).read_text()
    assert "Trained on seed 3: " in page and "seed 5:" not in page


def test_stages_need_their_inputs(params, tmp_path):
    layout = Layout(tmp_path)
    with pytest.raises(FileNotFoundError, match="run the `train` stage first"):
        evaluate(params, layout)
    with pytest.raises(FileNotFoundError, match=r"train\.json is missing: run the `train` stage"):
        report(params, layout)
