# Two entry points for a fresh machine: `make repro` (the default experiment through
# `dvc repro`) and `make test`.
PY := .venv/bin/python
# The stages run `python -m pipelines ...`: put the project's interpreter first on PATH.
RUN := PATH="$(CURDIR)/.venv/bin:$$PATH" DVC_NO_ANALYTICS=1 DO_NOT_TRACK=1

.venv/ready: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e ".[dev]"
	touch .venv/ready

setup: .venv/ready

repro: .venv/ready
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
	$(RUN) $(PY) -m pytest

.PHONY: setup repro search compare baseline test
