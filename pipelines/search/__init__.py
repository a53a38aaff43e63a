"""The Optuna search (`python -m pipelines search`), a module per job:

- `cli`: the command; `stage`: a search from start to reports; `space`: the `search:`
  section (read by the search alone).
- `study`: the study, its sampler and pruner; `storage`: where it lives (`journal` or
  `database`); `errors`: how the search fails in one line.
- `sampling`: a trial's values; `objective`: a trial trained by an injected training
  function; `trial_checkpoints`: what a stopped trial's retry goes on from.
- `worker`: one process's trials; `processes`: the search's extra worker processes;
  `recovery`: the trials a dead worker or a Ctrl-C interrupted; `trials`: how trials count.
- `reports`: best_params.yaml, trials.csv, summary.md and plots.
"""
