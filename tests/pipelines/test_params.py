import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.params import ParamsError, load_params, parse_params
from pipelines.search.space import search_section
from rlcore.algos.config import PPOConfig
from rlcore.algos.registry import algorithm_spec
from rlcore.config import EnvConfig, PolicyConfig
from rlcore.presets import GRPO_PRESETS, PRESETS, SAC_PRESETS
from tests.rlcore.algos.plugins.ppo_variant import UNDECLARED, PPOVariantConfig, registered

REPO = Path(__file__).resolve().parents[2]


def test_the_default_experiment_is_the_tuned_push_cube_ppo_preset():
    params = load_params(REPO / "params.yaml")
    assert params.env.name == "push_cube" and params.algorithm.name == "ppo"
    experiment = params.experiment()
    assert experiment.algo == params.algorithm.ppo
    # The preset's settings (what the benchmarks measure), periodic checkpoints included.
    assert experiment == PRESETS["push_cube"]
    assert len(params.schedule.cron.split()) == 5


def test_grpo_is_chosen_by_name_with_its_own_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("algorithm:\n  name: grpo\n  grpo:\n    group_size: 8\n")
    experiment = load_params(path).experiment()
    assert experiment.algorithm == "grpo" and experiment.algo.group_size == 8


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("algorithm:\n  ppo:\n    clipeps: 0.1\n", "algorithm.ppo.clipeps: unknown key"),
        ("trainer:\n  num_steps: many\n", "trainer.num_steps: Input should be a valid integer"),
        ("algorithm:\n  ppo:\n    clip_eps: -1\n", "algorithm.ppo.clip_eps: must be > 0, got -1"),
        ("env:\n  num_envs: 0\n", "env.num_envs: must be a positive integer, got 0"),
        ("env: [1, 2\n", "line 2, column 1: malformed YAML"),
        ("- 1\n- 2\n", "<top level>: must be a mapping, got list"),
        (
            "algorithm:\n  name: a2c\n",
            "algorithm.name: 'a2c': choose one of ['grpo', 'ppo', 'sac'] or 'package.module:name'",
        ),
        (
            "algorithm:\n  name: no_such_pkg.algos:a2c\n",
            "algorithm.name: 'no_such_pkg.algos:a2c': cannot import module 'no_such_pkg.algos'",
        ),
        ("algorithm:\n  dqn:\n    lr: 0.1\n", "algorithm.dqn: unknown key"),
        ("algorithm:\n  sac:\n    tau: 2\n", "algorithm.sac.tau: must be in (0, 1], got 2"),
        ("replay:\n  batch_size: 0\n", "replay.batch_size: must be a positive integer, got 0"),
        (
            "replay:\n  offline: {path: data, fraction: 2}\n",
            "replay.offline.fraction: must be in [0, 1], got 2",
        ),
        # Layouts of other tools and older versions: each says what to write instead.
        ("algorithm: ppo\n", "algorithm: must be a mapping; write `algorithm: {name: ppo, ppo:"),
        ("ppo:\n  lr: 0.1\n", "ppo: algorithm settings live under `algorithm.ppo`"),
        (
            "algorithm:\n  name: ppo\n  cfg: {lr: 0.1}\n",
            "algorithm.cfg: an EmbodiChain-style section",
        ),
        (
            "algorithm:\n  grpo:\n    group_size: 1\n",
            "algorithm.grpo.group_size: must be an int >= 2, got 1",
        ),
        (
            "env:\n  num_envs: 6\nalgorithm:\n  name: grpo\n",
            "algorithm.grpo.group_size: must divide env.num_envs (6), got 4",
        ),
    ],
)
def test_bad_params_fail_with_one_clear_line(tmp_path, text, line):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert len(info.value.lines) == 1
    assert info.value.lines[0].startswith(line), info.value.lines


def test_sac_selects_its_section_and_the_replay_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(
        "algorithm:\n  name: sac\n  sac: {tau: 0.01}\n  ppo: {lr: 0.5}\n"
        "replay: {batch_size: 64, offline: {path: data/set}}\n"
    )
    experiment = load_params(path).experiment()
    assert experiment.algorithm == "sac" and experiment.algo.tau == 0.01
    assert experiment.replay.batch_size == 64
    assert (
        experiment.replay.offline.path == "data/set" and experiment.replay.offline.fraction == 0.5
    )


def test_stage_cli_rejects_bad_params_before_touching_outputs(tmp_path):
    (tmp_path / "params.yaml").write_text("algorithm:\n  ppo:\n    clip_eps: -1\n")
    metrics = tmp_path / "metrics" / "train.json"
    metrics.parent.mkdir()
    metrics.write_text('{"previous": 1}')
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "train"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: params.yaml: algorithm.ppo.clip_eps: must be > 0, got -1.0"
    )
    assert metrics.read_text() == '{"previous": 1}'
    assert not (tmp_path / "outputs").exists()


def test_every_search_setting_can_be_set_like_dvc_exp_run_s(tmp_path):
    """`dvc exp run -S search.overrides.trainer.total_env_steps=...` edits params.yaml with
    DVC's own override code; nested paths in `search` make every setting reachable."""
    import shutil
    from pathlib import Path

    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    shutil.copy(Path(__file__).parents[2] / "params.yaml", path)
    apply_overrides(
        path,
        [
            "search.overrides.trainer.total_env_steps=5000",
            "search.space.algorithm.ppo.lr.high=0.01",
            "search.space.policy.hidden_sizes.choices=[[8],[16]]",
        ],
    )
    search = search_section(load_params(path))
    assert search.overrides["trainer.total_env_steps"] == 5000
    assert search.space["algorithm.ppo.lr"].high == 0.01
    assert search.space["policy.hidden_sizes"].choices == [[8], [16]]


def test_search_paths_may_be_nested_or_dotted_alike():
    nested = {"space": {"algorithm": {"ppo": {"lr": {"type": "float", "low": 0.1, "high": 1}}}},
              "overrides": {"trainer": {"num_steps": 8}}}  # fmt: skip
    dotted = {"space": {"algorithm.ppo.lr": {"type": "float", "low": 0.1, "high": 1}},
              "overrides": {"trainer.num_steps": 8}}  # fmt: skip
    assert search_section(parse_params({"search": nested})) == search_section(
        parse_params({"search": dotted})
    )


# --- presets: the keys params.yaml leaves out ------------------------------------------


def load_text(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return load_params(path)


def test_a_named_preset_is_the_whole_experiment(tmp_path):
    params = load_text(tmp_path, "preset: mujoco_halfcheetah\nalgorithm: {name: sac}\n")
    assert params.experiment() == SAC_PRESETS["mujoco_halfcheetah"]


def test_the_file_overrides_the_preset_key_by_key(tmp_path):
    params = load_text(
        tmp_path,
        "preset: push_cube\nalgorithm: {ppo: {lr: 3.0e-4}}\n"
        "trainer: {stop_at_eval_success: null, total_env_steps: 1000}\n",
    )
    tuned = PRESETS["push_cube"]
    assert params.experiment().algo == dataclasses.replace(tuned.algo, lr=3e-4)
    trainer = dataclasses.replace(
        tuned.trainer, stop_at_eval_success=None, total_env_steps=1000
    )  # null replaces the preset's value
    assert params.trainer == trainer and params.policy == tuned.policy


def test_changing_only_the_env_name_takes_its_familys_settings(tmp_path):
    params = load_text(tmp_path, "env: {name: 'gymnasium:Ant-v5'}\n")
    mujoco = PRESETS["gym_locomotion"]  # the MuJoCo family's defaults
    experiment = params.experiment()
    assert experiment.env == EnvConfig("gymnasium:Ant-v5", num_envs=mujoco.env.num_envs)
    assert experiment.policy == mujoco.policy and experiment.algo == mujoco.algo
    assert experiment.trainer == mujoco.trainer


def test_a_family_default_drops_the_stop_target_of_its_presets_env(tmp_path):
    params = load_text(tmp_path, "env: {name: 'gymnasium:Acrobot-v1'}\nalgorithm: {name: grpo}\n")
    cartpole = GRPO_PRESETS["cartpole"]  # the discrete classic family's GRPO defaults
    assert params.experiment().algo == cartpole.algo
    assert params.trainer.stop_at_eval_return is None  # CartPole's 475 means nothing here
    assert params.trainer == dataclasses.replace(cartpole.trainer, stop_at_eval_return=None)


def test_a_discrete_classic_env_without_a_preset_gets_the_acrobot_settings(tmp_path):
    params = load_text(tmp_path, "env: {name: 'gymnasium:MountainCar-v0'}\n")
    acrobot = PRESETS["gym_acrobot"]
    experiment = params.experiment()
    assert experiment.env == EnvConfig("gymnasium:MountainCar-v0", num_envs=32)
    assert experiment.policy == acrobot.policy and experiment.algo == acrobot.algo
    assert experiment.trainer == acrobot.trainer


def test_the_envs_own_preset_is_picked_by_auto(tmp_path):
    params = load_text(tmp_path, "env: {name: 'gymnasium:CartPole-v1'}\n")
    assert params.experiment() == PRESETS["gym_cartpole"]


def test_another_env_drops_a_named_presets_env_options(tmp_path):
    params = load_text(tmp_path, "preset: gym_cartpole\nenv: {name: cartpole}\n")
    assert params.env == EnvConfig("cartpole", num_envs=8)  # no bridge options
    assert params.experiment().algo == PRESETS["gym_cartpole"].algo


def test_preset_none_and_unknown_envs_get_the_librarys_defaults(tmp_path):
    params = load_text(tmp_path, "preset: none\nenv: {name: push_cube}\n")
    assert params.experiment().algo == PPOConfig() and params.policy == PolicyConfig()
    unknown_family = load_text(tmp_path, "env: {name: 'gymnasium:FrozenLake-v1'}\n")
    assert unknown_family.experiment().algo == PPOConfig()


def test_an_unknown_preset_lists_the_algorithms_presets(tmp_path):
    with pytest.raises(ParamsError) as err:
        load_text(tmp_path, "preset: halfcheetah\nalgorithm: {name: sac}\n")
    (line,) = err.value.lines
    assert line == (
        "preset: unknown preset 'halfcheetah' for sac; one of: auto, none, gym_halfcheetah, "
        "gym_locomotion, mujoco_halfcheetah, pendulum, push_cube, push_cube_pixels"
    )
    with pytest.raises(ParamsError, match="preset: must be a preset name"):
        load_text(tmp_path, "preset: 3\n")


def test_an_algorithm_of_your_own_takes_the_presets_it_declares(tmp_path, monkeypatch):
    name = registered(monkeypatch)  # presets_from="ppo"
    tuned = PRESETS["push_cube"]
    for preset in ("push_cube", "auto"):  # named, and the env's own
        params = load_text(
            tmp_path,
            f"preset: {preset}\nenv: {{name: push_cube}}\n"
            f"algorithm: {{name: {name}, {name}: {{num_epochs: 4}}}}\n",
        )
        experiment = params.experiment()
        # PPO's preset's settings the variant has (lr, num_minibatches), the file's value,
        # and its own default for what no PPO preset has (mirror_coef).
        assert experiment.algo == PPOVariantConfig(lr=1e-3, num_epochs=4, num_minibatches=8)
        assert experiment.env == tuned.env and experiment.policy == tuned.policy
        assert experiment.trainer == dataclasses.replace(tuned.trainer, seed=0)


def test_a_named_preset_for_an_algorithm_that_declares_none_is_refused(tmp_path, monkeypatch):
    name = registered(monkeypatch, UNDECLARED)
    with pytest.raises(ParamsError) as err:
        load_text(tmp_path, f"preset: push_cube\nalgorithm: {{name: {name}}}\n")
    assert err.value.lines == [
        "preset: 'push_cube': algorithm ppo_undeclared takes no presets; declare whose it "
        "takes where it registers, AlgorithmSpec(..., presets_from='ppo'), or write preset: none"
    ]
    assert load_text(tmp_path, f"algorithm: {{name: {name}}}\n").experiment().algo == (
        PPOVariantConfig()
    )  # auto: the library's defaults


def test_the_parameter_reference_lists_every_key_and_is_the_default_experiment():
    reference = REPO / "docs" / "params-reference.yaml"
    documented, default = load_params(reference), load_params(REPO / "params.yaml")
    assert documented.experiment() == default.experiment()
    assert search_section(documented) == search_section(default)
    same = {"algorithm": default.algorithm, "search": default.search}
    assert documented.model_copy(update=same) == default
    raw = yaml.safe_load(reference.read_text())

    def keys(tree, prefix=""):
        out = set()
        for key, value in tree.items():
            out.add(prefix + key)
            if isinstance(value, dict) and key not in ("options", "space", "overrides"):
                out |= keys(value, f"{prefix}{key}.")
        return out

    resolved = default.model_dump(mode="json")
    resolved["search"] = search_section(default).model_dump(mode="json")
    del resolved["trainer"]["seed"]
    resolved["algorithm"] = {
        name: section for name, section in resolved["algorithm"].items() if section is not None
    } | {"grpo": {}, "sac": {}}
    missing = {key for key in keys(resolved) if not key.startswith("algorithm.")} - keys(raw)
    assert not missing
    for name in ("ppo", "grpo", "sac"):
        fields = {f.name for f in dataclasses.fields(algorithm_spec(name).config)}
        assert fields == set(raw["algorithm"][name]), name


def test_log_every_auto_logs_about_every_thousand_env_steps(tmp_path):
    runtime = load_text(tmp_path, "runtime: {log_every_iters: auto}\n").runtime
    assert runtime.log_every(4096) == 1  # a PPO rollout: every iteration
    assert runtime.log_every(32) == 32 and runtime.log_every(1) == 1000  # SAC iterations
    assert load_text(tmp_path, "runtime: {log_every_iters: 5}\n").runtime.log_every(1) == 5
    with pytest.raises(ParamsError, match=r"runtime\.log_every_iters: must be >= 1 or auto"):
        load_text(tmp_path, "runtime: {log_every_iters: 0}\n")


def test_a_union_fields_errors_merge_into_one_line_keeping_a_constraint():
    """pydantic reports one error per branch of `int >= 1 | "auto"`: one line names all the
    field takes, and a branch's constraint where the value was of its type."""
    from typing import Annotated, Literal

    import pydantic

    from pipelines.params.errors import describe_errors

    class Section(pydantic.BaseModel):
        every: Annotated[int, pydantic.Field(ge=1)] | Literal["auto", "never"] = "auto"

    def lines(value: object) -> list[str]:
        with pytest.raises(pydantic.ValidationError) as raised:
            Section(every=value)
        return describe_errors(raised.value, ["runtime"])

    assert lines("often") == ["runtime.every: must be an integer, auto or never, got 'often'"]
    assert lines(0) == [
        "runtime.every: must be an integer (input should be greater than or equal to 1), auto "
        "or never, got 0"
    ]
