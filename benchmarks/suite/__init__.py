"""A suite of tasks nobody tuned: only `env.name` set, against SB3's defaults, side by side.

Run from the repository root (needs the `bench` extra; `mujoco` for the MuJoCo tasks):

    .venv/bin/python -m benchmarks.suite                    # PPO: 11 MuJoCo v5 + 5 classic tasks
    .venv/bin/python -m benchmarks.suite --algorithm sac    # SAC: the continuous-action tasks
    .venv/bin/python -m benchmarks.suite --envs Hopper-v5 Pendulum-v1 --seeds 0
    .venv/bin/python -m benchmarks.suite --estimate-only    # short timings: CPU time per run
    .venv/bin/python -m benchmarks.suite --report-only      # the table of the results so far

Per task, seed and implementation, ours is what a params.yaml holding only
`env: {name: "gymnasium:<id>"}` (for SAC also `algorithm: {name: sac}`) trains (`preset:
auto`, `benchmarks.env_defaults.run_ours`); SB3 is `PPO("MlpPolicy", env)` or
`SAC("MlpPolicy", env)` with every default on one env (`run_sb3`). Each is evaluated on
deterministic episodes with seeds training never used. Budgets: PPO 300k env steps on MuJoCo,
100k on classic control; SAC 100k; `--steps` sets one for all. Runs go one after another in
this process on the CPU, with the torch threads of `--threads` (default 1), checked after each
run, taking turns per seed; CPU time is the process's for training, evaluation excluded. To
use more cores, start one process per core on the same `--results`, each with its own
`--envs` (or `--seeds`): their caches merge, and each task's runs stay side by side.

Resumable: each run writes its result file into `--results` (atomically) when it ends; a rerun
skips the runs whose file holds a result and redoes the others (an interrupted run left none).
Before training, two short runs of each task and implementation time its cost per env step
and print the CPU time each run will take (cached beside the results).

Scores: a task's normalised score is (return - random policy's) / (SB3's mean - random's), so
SB3's mean is 1; the random policy's return (uniform random actions, fixed seeds) is measured
once per task and cached. Over the tasks where SB3 beats random: the interquartile mean (IQM)
of ours' (task, seed) scores and of SB3's, and their ratio, each with a stratified-bootstrap
95% interval (seeds resampled within each task, percentile method: rliable's definitions).
Targets (P17, for PPO; printed for SAC as well): every MuJoCo task's score >= 0.9; MuJoCo IQM
ours / SB3 >= 1.5; CPU time ours / SB3 <= 0.5 per task; classic control: ours' mean return >=
SB3's. The table comes from whatever results exist; missing runs are listed.

The simulator's floor: the CPU time per env step of the task's own simulation under random
actions, timed once per task on the machine of the runs and cached (`simulator.json`). Both
implementations pay it per env step, so where it is a large share of SB3's CPU time no
learner can reach a small ratio of totals; the ratio of the CPU spent beyond it says what
each implementation itself costs.
"""
