# Two entry points for a fresh machine: `make repro` (the default experiment through
# `dvc repro`) and `make test`.
PY := .venv/bin/python
# The stages run `python -m pipelines ...`: put the project's interpreter first on PATH.
RUN := PATH="$(CURDIR)/.venv/bin:$$PATH" DVC_NO_ANALYTICS=1 DO_NOT_TRACK=1

# constraints.txt pins every package to the release the committed results were made with, so
# a fresh clone installs what was tested (pyproject.toml says which releases may work).
.venv/ready: pyproject.toml constraints.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -c constraints.txt -e ".[dev]"
	touch .venv/ready

setup: .venv/ready

# params.yaml is checked first, within bounds: DVC itself reads it whole, and a YAML alias
# bomb in it would exhaust DVC's memory before any stage could refuse it.
repro: .venv/ready
	$(RUN) $(PY) -m pipelines params
	$(RUN) .venv/bin/dvc repro
	@echo
	@echo "per seed S: outputs/seeds/S/checkpoints/final.pt  metrics/seeds/S/{train,eval}.json"
	@echo "over seeds: metrics/summary.json  reports/run/report.md  video: outputs/video/episodes.mp4"

search: .venv/ready
	$(RUN) .venv/bin/dvc repro search/dvc.yaml
	@echo
	@echo "summary: reports/search/summary.md   best params: reports/search/best_params.yaml"

compare: .venv/ready
	$(RUN) $(PY) -m pipelines compare

baseline: .venv/ready
	$(RUN) $(PY) -m pipelines baseline

test: .venv/ready
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(RUN) $(PY) -m pytest -n 2

# Refresh constraints.txt: the newest releases pyproject.toml allows (all extras but the
# CUDA one), resolved in a throwaway venv. Then `make test` and re-run what you cite.
LOCK_EXTRAS := dev,bench,cmaes,postgres,dashboard,classic-control,mujoco,mujoco-warp
lock:
	rm -rf .venv-lock
	python3 -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q -e ".[$(LOCK_EXTRAS)]"
	{ sed -n '/^#/p' constraints.txt; \
	  .venv-lock/bin/pip freeze --exclude-editable | sed -E 's/\+[A-Za-z0-9.]+$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-lock

.PHONY: setup repro search compare baseline test lock
