"""benchmarks/compile_returns.py: the modes differ in one thing each, the summary's figures
against hand-computed ones, and resuming skips what a results file holds."""

import json
import math
from pathlib import Path

import pytest

from benchmarks import compile_returns
from benchmarks.compile_returns import experiment, seed_range, summarize, welch_t


def test_only_the_same_step_mode_sets_the_reset_option():
    eager, same_step = (
        experiment("Hopper-v5", 1000, "eager"),
        experiment("Hopper-v5", 1000, "same-step"),
    )
    assert eager.env.options == {}
    assert same_step.env.options == {"autoreset": "same-step"}
    assert eager.trainer.total_env_steps == same_step.trainer.total_env_steps == 1000
    assert eager.algorithm == same_step.algorithm  # the family's settings, the same in both


def test_welch_t_against_a_hand_computed_value():
    # means 3 and 1, variances 1 and 1, n 3 each: se = sqrt(1/3 + 1/3), t = 2 / se
    assert welch_t([2.0, 3.0, 4.0], [0.0, 1.0, 2.0]) == pytest.approx(2 / math.sqrt(2 / 3))
    assert math.isnan(welch_t([1.0], [1.0, 2.0]))


def test_summary_lines_per_env_and_mode():
    runs = [(0, "eager", 100.0, 10.0), (1, "eager", 300.0, 20.0),
            (0, "compiled", 200.0, 5.0), (1, "compiled", 400.0, 7.0)]  # fmt: skip
    rows = [{"env": "E", "seed": s, "mode": m, "return": r, "cpu_s": c} for s, m, r, c in runs]
    lines = summarize(rows)
    assert lines[2] == "| E | eager | 2 | 200 ± 141 | 200 | 15 |  |"
    # t = (300 - 200) / sqrt(20000/2 + 20000/2) = 100 / 141.42
    assert lines[3] == "| E | compiled | 2 | 300 ± 141 | 300 | 6 | +0.71 |"


def test_seed_ranges():
    assert seed_range("0-3") == [0, 1, 2, 3]
    assert seed_range("7") == [7]


def test_a_run_already_in_the_results_file_is_not_run_again(tmp_path, monkeypatch):
    results = tmp_path / "r.jsonl"
    done = {"env": "Hopper-v5", "seed": 0, "mode": "eager", "return": 1.0, "cpu_s": 1.0}
    results.write_text(json.dumps(done) + "\n")
    ran = []

    def fake_run(env_id, seed, mode, steps, eval_episodes):  # stands in for training only
        ran.append((env_id, seed, mode))
        return {"env": env_id, "seed": seed, "mode": mode, "return": 2.0, "cpu_s": 1.0}

    monkeypatch.setattr(compile_returns, "run", fake_run)
    compile_returns.main(["--envs", "Hopper-v5", "--seeds", "0-1", "--modes", "eager",
                          "--results", str(results)])  # fmt: skip
    assert ran == [("Hopper-v5", 1, "eager")]
    assert len(results.read_text().splitlines()) == 2


def test_one_update_from_a_mid_run_state_is_the_same_update_both_ways():
    result = compile_returns.same_state_update("CartPole-v1", updates=3, steps=50_000)
    assert result["change_norm"] > 1e-3  # the update moved the parameters
    assert result["relative_difference"] < 1e-4  # by float rounding only


def test_env_defaults_probe_files_summarize_by_their_compiled_flag(tmp_path):
    """`--summarize` reads `benchmarks.env_defaults --json` files too (the SAC probes), each
    run's mode from its `compiled`, SB3's runs left out."""

    def probe(name: str, returns: list[tuple[str, float, bool]], **extra: str) -> Path:
        runs = [{"env": "E", "impl": impl, "seed": 0, "return": r, "cpu_s": 1.0, "compiled": c}
                | extra for impl, r, c in returns]  # fmt: skip
        path = tmp_path / name
        path.write_text(json.dumps({"runs": runs}, indent=1))
        return path

    paths = [probe("a.json", [("ours", 100.0, False), ("sb3", 5.0, False)]),
             probe("b.json", [("ours", 300.0, False)]),
             probe("c.json", [("ours", 200.0, True)]),
             probe("d.json", [("ours", 400.0, True)]),
             probe("e.json", [("ours", 500.0, False)], sac_path="one-function-eager")]  # fmt: skip
    rows = compile_returns.load(paths)
    assert sorted((r["mode"], r["return"]) for r in rows) == [
        ("compiled", 200.0), ("compiled", 400.0), ("eager", 100.0), ("eager", 300.0),
        ("one-function-eager", 500.0),
    ]  # fmt: skip
    assert summarize(rows)[3] == "| E | compiled | 2 | 300 ± 141 | 300 | 1 | +0.71 |"
    assert summarize(rows)[4] == "| E | one-function-eager | 1 | 500 ± 0 | 500 | 1 | +nan |"
