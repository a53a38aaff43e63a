"""`benchmarks.sac_paths`: compiling changes nothing in a SAC run but the update, and the
compiled path's one function computes the eager update."""

from benchmarks.sac_paths import one_function_against_eager, sac_config, trainer_besides_the_update


def test_a_trainer_built_to_compile_trains_bit_identically_with_the_eager_update():
    cfg = sac_config("Pendulum-v1", seed=3)
    besides, plain = trainer_besides_the_update(cfg, iters=36)  # 4 iterations past warm-up
    assert besides["updates"] > 0
    assert besides["parameters_bit_identical"] and besides["rollout_bit_identical"]

    arithmetic = one_function_against_eager(cfg, plain, updates=3)
    plain.env.close()
    assert arithmetic["from_updates"] == besides["updates"]
    for count in ("1", "3"):
        parts = arithmetic[count]
        assert set(parts) == {"actor", "critics", "target critics", "temperature"}
        assert max(parts.values()) < 1e-4  # float rounding, not another update
