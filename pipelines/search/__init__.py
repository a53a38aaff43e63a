"""The Optuna search: the study (space, objective, workers, recovery, reports) and
its storage (a journal file or a database)."""
