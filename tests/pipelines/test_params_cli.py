"""`python -m pipelines params [--show]`: the file checked, and the experiment it resolves to."""

from pathlib import Path

import pytest
import torch
import yaml

from pipelines.__main__ import main
from pipelines.params import load_params

REPO = Path(__file__).resolve().parents[2]


def test_params_says_whether_runtime_compile_auto_compiles_and_why(tmp_path, capsys):
    long = tmp_path / "long.yaml"  # 2,000 iterations x 4 epochs x 4 minibatches = 32,000 steps
    long.write_text(
        "preset: none\nenv: {name: pendulum, num_envs: 8}\n"
        "algorithm: {ppo: {num_epochs: 4, num_minibatches: 4}}\n"
        "trainer: {num_steps: 16, total_env_steps: 256000}\nruntime: {compile: auto}\n"
    )
    assert main(["params", "--params", str(long)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("runtime.compile auto: compiled (32,000 minibatch steps planned)")
    # The default experiment (runtime.compile: auto) stops at a target: it trains eager.
    assert main(["params", "--params", str(REPO / "params.yaml")]) == 0
    assert "runtime.compile auto: eager (a stop target" in capsys.readouterr().out
    eager = tmp_path / "eager.yaml"  # compile: false says nothing about compiling
    eager.write_text(long.read_text().replace("compile: auto", "compile: false"))
    assert main(["params", "--params", str(eager)]) == 0
    assert "runtime.compile" not in capsys.readouterr().out


def test_show_prints_a_resolved_experiment_that_reads_back_the_same(tmp_path, capsys):
    sparse = tmp_path / "params.yaml"
    sparse.write_text("name: pend\nenv: {name: pendulum, num_envs: 8}\nalgorithm: {name: sac}\n")
    assert main(["params", "--params", str(sparse)]) == 0
    assert capsys.readouterr().out.startswith(f"{sparse}: valid. pend: sac on pendulum (8 envs")

    assert main(["params", "--params", str(sparse), "--show"]) == 0
    shown = capsys.readouterr().out
    data = yaml.safe_load(shown)
    assert shown.startswith(f"# {sparse}, resolved: pend: sac on pendulum")
    assert list(data["algorithm"]) == ["name", "sac"]  # only the chosen algorithm's section
    assert data["algorithm"]["sac"]["tau"] == 0.005 and data["replay"]["batch_size"] == 256
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(shown)
    assert load_params(resolved).experiment() == load_params(sparse).experiment()


def test_the_projects_params_resolve_to_themselves(tmp_path, capsys):
    assert main(["params", "--params", str(REPO / "params.yaml"), "--show"]) == 0
    (tmp_path / "resolved.yaml").write_text(capsys.readouterr().out)
    resolved, committed = load_params(tmp_path / "resolved.yaml"), load_params(REPO / "params.yaml")
    assert resolved.experiment() == committed.experiment() and resolved.search == committed.search


def test_a_bad_file_is_one_line_and_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text("env: {num_envs: 0}\n")
    assert main(["params", "--params", str(bad), "--show"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: env") and len(err.strip().splitlines()) == 1


def test_a_search_space_for_another_algorithm_stops_only_the_search(tmp_path, capsys):
    """`dvc exp run -S algorithm.name=sac` on a file whose search tunes PPO: the stages (which
    never read `search`) run, `params` notes it, and the search refuses in one line."""
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["algorithm"]["name"] = "sac"
    data["env"]["name"] = "pendulum"
    ppo_keys = list(data["search"]["space"]["algorithm"]["ppo"])
    data["search"]["enqueue"] = [{"algorithm.ppo.lr": 3e-4}]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    line = (
        f"search.space.algorithm.ppo ({', '.join(ppo_keys)}): tunes ppo's settings, but "
        "algorithm.name is sac: search algorithm.sac.<key> instead, or choose ppo"
    )

    assert load_params(path).algorithm.name == "sac"
    assert main(["params", "--params", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}: valid.")
    assert err.splitlines() == [f"note: {path}: {line} (the search alone refuses it)"]

    # A stage gets past validation (exit 2) to its own work: no checkpoint to evaluate yet.
    assert main(["evaluate", "--params", str(path), "--seed", "0"]) == 1
    assert "error: evaluate:" in capsys.readouterr().err

    assert main(["search", "--params", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {path}: {line}"]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (
            "env: {name: cartpole}\nalgorithm: {name: sac}\n",
            "algorithm.name 'sac' needs a continuous (1-D Box) action space",
        ),
        (
            "env: {name: push_cube_pixels, options: {image_size: 16}}\n"
            "policy: {encoders: {image: nature}}\n",
            "encoder 'nature' needs images of at least 36x36",
        ),
        (
            "env: {name: cartpole, frame_stack: 2}\n",
            "env.frame_stack: 2 stacks camera images",
        ),
    ],
    ids=["sac-on-discrete", "image-too-small", "frame-stack-without-images"],
)
def test_what_train_refuses_params_refuses_with_the_same_line(tmp_path, capsys, text, refusal):
    """One validation path: `params` builds what `train` builds before training."""
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert main(["params", "--params", str(path)]) == 2
    params_err = capsys.readouterr().err.strip()
    assert params_err.startswith(f"error: {path}: ") and refusal in params_err
    assert len(params_err.splitlines()) == 1
    assert main(["train", "--params", str(path)]) == 1
    train_err = capsys.readouterr().err.strip().splitlines()[-1]
    assert train_err.removeprefix("error: train: ") == params_err.removeprefix(f"error: {path}: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal on a machine without CUDA")
def test_a_cuda_preset_on_a_machine_without_cuda_is_one_line_and_runs_on_the_cpu_when_told(
    tmp_path, capsys
):
    path = tmp_path / "params.yaml"
    path.write_text("preset: cuda_push_cube\n")
    assert main(["params", "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"error: {path}: env.device 'cuda': CUDA is not available")
    path.write_text("preset: cuda_push_cube\nenv: {device: cpu}\n")
    assert main(["params", "--params", str(path)]) == 0
    assert "4096 envs" in capsys.readouterr().out


def test_naming_a_gpu_for_an_env_picks_its_gpu_preset(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("env: {name: push_cube, device: cuda}\n")
    params = load_params(path)
    assert (params.env.num_envs, params.trainer.num_steps) == (4096, 16)
    path.write_text("env: {name: push_cube, device: cuda, num_envs: 1024}\n")
    assert load_params(path).env.num_envs == 1024  # the file still wins key by key


def test_options_written_before_the_command_are_the_commands_own(tmp_path, capsys):
    """`python -m pipelines --params FILE params` reads FILE as `params --params FILE` does
    (it once ran `params` as a stage and ended in a KeyError's traceback)."""
    sparse = tmp_path / "params.yaml"
    sparse.write_text("name: pend\nenv: {name: pendulum, num_envs: 8}\n")
    assert main(["params", "--params", str(sparse), "--show"]) == 0
    after = capsys.readouterr().out
    assert main(["--params", str(sparse), "params", "--show"]) == 0
    assert capsys.readouterr().out == after and "pendulum" in after
    # A command that takes no such option says so, in one usage line: exit code 2.
    with pytest.raises(SystemExit) as stopped:
        main(["--params", str(sparse), "baseline"])
    assert stopped.value.code == 2
    assert "unrecognized arguments: --params" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["--seed", "1", "params"])
    assert stopped.value.code == 2
    assert "--seed applies to train and evaluate only" in capsys.readouterr().err
