# Two commands on a fresh machine: `make report` (the main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: report test lint setup system-deps clean

report: $(STAMP)
	$(BIN)/symbolic report -o reports/llama-3-8b-h100.pdf

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check symbolic tests benchmarks

setup: $(STAMP)

system-deps:
	bash scripts/system-deps.sh

$(STAMP): pyproject.toml
	bash scripts/system-deps.sh
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build dist *.egg-info
