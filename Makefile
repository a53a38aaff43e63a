# Two entry points for a fresh machine: `make train` (the default experiment) and `make test`.
PY := .venv/bin/python

.venv/ready: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e ".[dev]"
	touch .venv/ready

setup: .venv/ready

train: .venv/ready
	$(PY) -m pipelines.train --overwrite

test: .venv/ready
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(PY) -m pytest

.PHONY: setup train test
