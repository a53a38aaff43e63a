"""benchmarks/fast_path.py: its targets table from hand-made figures, and a tiny real run."""

import json
from pathlib import Path

from benchmarks.fast_path import TARGET_N, check_targets, main, merge_sps


def _line(rows: list[dict], start: str) -> dict:
    return next(row for row in rows if row["figure"].startswith(start))


def test_merge_sps_adds_the_compiled_train_figures_and_their_share_of_the_env():
    eager = [{"env": "cartpole", "N": TARGET_N, "env_sps": 200.0, "train_sps": 20.0}]
    compiled = [{"env": "cartpole", "N": TARGET_N, "train_sps": 60.0}]
    (row,) = merge_sps(eager, compiled)
    assert row["train_sps_compiled"] == 60.0
    assert row["train_over_env"] == 0.1  # 20 / 200
    assert row["train_over_env_compiled"] == 0.3  # 60 / 200
    assert "train_sps_compiled" not in eager[0]  # the inputs are left as they were


def test_gpu_targets_read_their_figures_and_the_cpu_lines_stay_unmeasured():
    results = {
        "sps": [
            {"env": "cartpole", "N": TARGET_N, "train_over_env_compiled": 0.62,
             "collector_ratio": 0.9},
            {"env": "cartpole", "N": 4096, "train_over_env_compiled": 0.1},
        ],
        "step": [
            {"task": "cartpole", "rows": 4096, "variant": "graph", "ms": 0.2, "vs_eager": 0.06},
            {"task": "halfcheetah", "rows": 32768, "variant": "graph", "ms": 1.2, "vs_eager": 0.3},
        ],
        "presets": [
            {"task": "cuda_push_cube", "reached": True, "wall_ex_eval_s": 9.0},
            {"task": "cuda_push_cube", "reached": True, "wall_ex_eval_s": 2.0},
            {"task": "cuda_push_cube", "reached": False, "wall_ex_eval_s": 1.0},
        ],
    }  # fmt: skip
    rows = check_targets(results, "cuda")
    train = _line(rows, "+train / env-only SPS, cartpole")
    assert (train["value"], train["verdict"]) == (0.62, "met")  # N = 65,536's row, not 4,096's
    collector = _line(rows, "collector / ideal")
    assert (collector["value"], collector["verdict"]) == (0.9, "MISSED")  # target 0.95
    step = _line(rows, "PPO minibatch step, graphed")
    assert (step["value"], step["verdict"]) == (1.2, "MISSED")  # the slowest graphed step
    push = _line(rows, "push_cube success")
    assert (push["value"], push["verdict"]) == (2.0, "met")  # fastest run that reached it
    warp = _line(rows, "+train / env-only SPS, Warp")
    assert warp["value"] is None and warp["verdict"] == "-"
    assert "mujoco_warp" in warp["measured by"]
    cpu_step = _line(rows, "PPO minibatch step, 64x64")
    assert cpu_step["value"] is None  # a GPU run does not answer a CPU line


def test_cpu_targets_take_the_smallest_cartpole_minibatch_and_the_compiled_sac_update():
    results = {
        "step": [
            {"task": "cartpole", "rows": 512, "variant": "step", "vs_eager": 0.7},
            {"task": "cartpole", "rows": 64, "variant": "step", "vs_eager": 0.46},
            {"task": "halfcheetah", "rows": 64, "variant": "step", "vs_eager": 0.3},
        ],
        "sac": [
            {"precision": p, "compiled": c, "compiled_vs_eager": r, "update_ms": ms}
            for p, c, r, ms in [
                ("float32", False, 1.0, 20.0), ("float32", True, 1.44, 28.8),
                ("bfloat16", False, 1.0, 10.0), ("bfloat16", True, 0.6, 6.0),
            ]
        ],
    }  # fmt: skip
    rows = check_targets(results, "cpu")
    step = _line(rows, "PPO minibatch step, 64x64")
    assert (step["value"], step["verdict"]) == (0.46, "MISSED")
    sac = _line(rows, "SAC update (")
    assert (sac["value"], sac["verdict"]) == (1.44, "MISSED")  # float32's, not bf16's 0.6
    bf16 = _line(rows, "SAC update, bf16")
    assert (bf16["value"], bf16["verdict"]) == (0.3, "met")  # 6.0 ms against float32's 20.0
    assert _line(rows, "+train / env-only SPS, cartpole")["value"] is None


def test_a_tiny_cpu_run_prints_the_targets_and_writes_its_figures(tmp_path: Path, capsys):
    out = tmp_path / "fast_path.json"
    main(["--device", "cpu", "--sections", "sps", "--no-compile", "--sizes", "8",
          "--reps", "1", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "targets (issue P19), cpu:" in printed
    written = json.loads(out.read_text())
    envs = {(row["env"], row["N"]) for row in written["sps"]}
    assert envs == {("cartpole", 8), ("push_cube", 8)}
    for row in written["sps"]:
        assert row["env_sps"] > 0 and row["train_sps"] > 0
        assert row["train_over_env"] == row["train_sps"] / row["env_sps"]
    assert len(written["targets"]) == 11
