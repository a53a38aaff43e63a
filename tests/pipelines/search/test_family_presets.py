"""The MuJoCo family's SAC defaults are the family study's chosen trial, exactly as the study
trained it: read from the committed journal (search/studies/mujoco_family-sac.log), applied
to the study's params as the search applies them."""

import dataclasses

import optuna

from pipelines.layout import Layout
from pipelines.params import apply_values, load_params
from pipelines.search.sampling import trial_values
from pipelines.search.space import search_section
from pipelines.search.storage import make_storage
from rlcore.presets import SAC_PRESETS, choose_preset
from tests.pipelines.search.tiny_study import REPO

CHOSEN_TRIAL = 11  # benchmarks/README.md, *suite*, "The SAC family study"


def test_the_sac_family_defaults_are_the_studys_chosen_trial():
    path = REPO / "search" / "mujoco_family-sac.yaml"
    params = load_params(path)
    search = search_section(params, path)
    layout = Layout(REPO).for_search_params(path, search.study_name)
    study = optuna.load_study(study_name=search.study_name, storage=make_storage(search, layout))
    chosen = study.get_trials(deepcopy=False)[CHOSEN_TRIAL]
    assert chosen.number == CHOSEN_TRIAL and chosen.state.name == "COMPLETE"
    trained = apply_values(params, {**search.overrides, **trial_values(chosen, search.space)})
    cfg, preset = trained.experiment(seed=0), SAC_PRESETS["gym_locomotion"]

    assert cfg.policy == preset.policy
    # The study multiplied in bf16 (`precision: auto` on its CPU); the family, in float32.
    assert cfg.algo.precision == "auto" and preset.algo.precision == "float32"
    assert dataclasses.replace(cfg.algo, precision="float32") == preset.algo
    assert cfg.trainer.num_steps == preset.trainer.num_steps == 4
    # The study kept 100k transitions (all of a trial's); the preset keeps its 1M steps' worth.
    assert dataclasses.replace(cfg.replay, capacity=1) == dataclasses.replace(
        preset.replay, capacity=1
    )
    assert preset.replay.capacity == preset.trainer.total_env_steps
    # Evaluations and checkpoints every 20k and 50k env steps, as the base preset's.
    base = SAC_PRESETS["gym_halfcheetah"]
    assert preset.trainer.eval_every_iters * 4 == base.trainer.eval_every_iters
    assert preset.trainer.checkpoint_every_iters * 4 == base.trainer.checkpoint_every_iters


def test_every_mujoco_task_without_its_own_sac_preset_takes_the_family_defaults():
    for env in ("gymnasium:Ant-v5", "gymnasium:Hopper-v5", "mujoco:Hopper", "gymnasium:Pusher-v5"):
        choice = choose_preset("auto", env, "sac")
        assert choice.config is SAC_PRESETS["gym_locomotion"] and choice.generic
    walker = choose_preset("auto", "gymnasium:Walker2d-v5", "sac")  # the preset's own env
    assert walker.config is SAC_PRESETS["gym_locomotion"] and not walker.generic
    cheetah = choose_preset("auto", "gymnasium:HalfCheetah-v5", "sac")  # tuned at 1M
    assert cheetah.config is SAC_PRESETS["gym_halfcheetah"]
