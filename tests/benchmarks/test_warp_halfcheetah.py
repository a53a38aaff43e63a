"""benchmarks/warp_halfcheetah.py: the preset with its flags, and a tiny real run on the CPU;
benchmarks/cuda_presets.py: which presets a device runs unless told."""

import json
from pathlib import Path

from benchmarks.cuda_presets import default_tasks
from benchmarks.warp_halfcheetah import PRESET, experiment, main
from rlcore.presets_cuda import CUDA_PRESETS


class Flags:
    device, engine, num_envs, num_steps, epochs, minibatches = "cpu", "auto", 16, None, 2, None
    lr = gamma = hidden = init_log_std = eval_every = eval_episodes = None
    seed = 3


def test_the_flags_change_only_what_they_name():
    cfg = experiment(Flags())
    assert cfg.env.device == "cpu" and cfg.env.num_envs == 16 and cfg.env.options == {}
    assert cfg.algo.num_epochs == 2 and cfg.trainer.seed == 3
    assert cfg.algo.num_minibatches == PRESET.algo.num_minibatches == 8
    assert cfg.algo.gamma == PRESET.algo.gamma == 0.95
    assert cfg.policy == PRESET.policy and cfg.trainer.num_steps == PRESET.trainer.num_steps
    assert cfg.trainer.stop_at_eval_return == 5000  # the preset's target stops the run
    assert cfg.trainer.total_env_steps == 16 * 20 * 100_000  # the wall budget ends it first
    warp = Flags()
    warp.engine = "warp"
    assert experiment(warp).env.options == {"engine": "warp"}


def test_a_tiny_cpu_run_prints_its_curve_and_writes_it(tmp_path: Path, capsys):
    out = tmp_path / "run.json"
    flags = "--device cpu --num-envs 4 --num-steps 8 --epochs 1 --seconds 0.5 --eval-every 1"
    main([*flags.split(), "--eval-episodes", "1", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["env_steps"] >= 32 and result["env_steps"] % 32 == 0
    assert len(result["curve"]) == result["env_steps"] // 32  # one evaluation per iteration
    steps = [point["env_steps"] for point in result["curve"]]
    assert steps == sorted(steps)
    assert result["target_wall_s"] is None  # 5,000 is out of reach in half a second
    assert "wall s to 5,000" in capsys.readouterr().out


def test_cuda_halfcheetah_runs_by_default_only_where_warp_runs_on_cuda():
    assert default_tasks("cpu") == ["cuda_cartpole", "cuda_push_cube"]
    assert set(CUDA_PRESETS) == {"cuda_cartpole", "cuda_push_cube", "cuda_halfcheetah"}
